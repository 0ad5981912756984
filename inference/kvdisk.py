"""Saved conversations' KV on disk: the host cache's second tier. File I/O only, no model.

One file per host entry, written whole to a temporary name and renamed, readable only by its
owner (it holds a conversation):

    b"QKV1" | header length (4 bytes, little endian) | header (JSON) | llama.cpp state blob

The header names the model fingerprint (the model file's sha256, the llama.cpp build and the KV
layout), the tenant, the exact tokens the KV stands for, and the blob's size and CRC-32; a
passage's KV (`inference.passages`, a store of its own in another folder) adds `meta`: its key
and the position it was computed at. A read
checks all of it against what the entry is expected to hold, so a file from another model, a
truncated or altered file, or one for other tokens is never restored: the caller recomputes.

Files live in `<directory>/<fingerprint>/<slot>/`. A worker takes the first slot whose lock it
can hold (`flock`, released when the process dies), so two workers on one machine never share
files, and a restarted worker finds what it left. At start, the directories of other
fingerprints that no running worker holds are removed: another model's cache is of no use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

logger = logging.getLogger(__name__)

MAGIC = b"QKV1"
MAX_HEADER = 4 * 1024 * 1024  # a header with 500k token ids; anything bigger is not ours
MAX_SLOTS = 64
Blob = np.ndarray[Any, np.dtype[np.uint8]]


@dataclass
class _File:
    path: Path
    tenant: str
    tokens: list[int]
    size: int  # bytes on disk
    meta: dict[str, Any] | None = None


def _name(fingerprint: str, tenant: str, tokens: list[int], meta: dict[str, Any] | None) -> str:
    named: list[Any] = [fingerprint, tenant, tokens] + ([meta] if meta else [])
    digest = hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()
    return f"{digest[:40]}.kv"


def _read_header(f: IO[bytes]) -> dict[str, Any] | None:
    head = f.read(8)
    if len(head) != 8 or head[:4] != MAGIC:
        return None
    (length,) = struct.unpack("<I", head[4:])
    if length > MAX_HEADER:
        return None
    try:
        header = json.loads(f.read(length))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return header if isinstance(header, dict) else None


class DiskKvStore:
    def __init__(self, directory: Path, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        root = directory / fingerprint[:32]
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock: IO[bytes] | None = None
        for slot in range(MAX_SLOTS):
            candidate = root / str(slot)
            candidate.mkdir(exist_ok=True, mode=0o700)
            lock = (candidate / ".lock").open("ab")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            self._lock = lock
            self.directory = candidate
            break
        else:
            raise OSError(f"all {MAX_SLOTS} cache slots under {root} are held by other workers")
        self._files: dict[int, _File] = {}  # host entry -> its file
        self._found: dict[str, _File] = {}  # files of an earlier run, by name, until bound
        self._prune_other_models(directory)

    def _prune_other_models(self, directory: Path) -> None:
        for other in directory.iterdir():
            if other.name == self.fingerprint[:32] or not other.is_dir():
                continue
            held = False
            for slot in other.iterdir():
                lock_path = slot / ".lock"
                if not lock_path.exists():
                    continue
                with lock_path.open("ab") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        held = True
            if not held:
                shutil.rmtree(other, ignore_errors=True)
                logger.info("removed another model's saved conversations: %s", other)

    @property
    def used_bytes(self) -> int:
        return sum(f.size for f in self._files.values())

    def write(
        self,
        entry: int,
        tenant: str,
        tokens: list[int],
        blob: Blob,
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Write an entry's KV; False (and nothing left behind) when the disk refuses."""
        data = blob.tobytes() if not blob.flags.c_contiguous else blob.data.cast("B")
        fields: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "tenant": tenant,
            "tokens": tokens,
            "size": len(data),
            "crc32": zlib.crc32(data),
        }
        if meta:
            fields["meta"] = meta
        header = json.dumps(fields).encode()
        path = self.directory / _name(self.fingerprint, tenant, tokens, meta)
        tmp = path.with_suffix(f".part-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + struct.pack("<I", len(header)) + header)
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            logger.warning("could not save a conversation's KV to %s: %s", path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        self._files[entry] = _File(path, tenant, list(tokens), path.stat().st_size, meta)
        return True

    def read(self, entry: int) -> Blob | None:
        """An entry's KV, or None when its file is gone or does not hold exactly what the entry
        stands for (model, tenant, tokens, size, checksum)."""
        known = self._files.get(entry)
        if known is None:
            return None
        try:
            with known.path.open("rb") as f:
                header = _read_header(f)
                if (
                    header is None
                    or header.get("fingerprint") != self.fingerprint
                    or header.get("tenant") != known.tenant
                    or header.get("tokens") != known.tokens
                    or header.get("meta") != known.meta
                ):
                    logger.warning("%s does not hold the expected conversation", known.path)
                    return None
                blob = np.frombuffer(f.read(), dtype=np.uint8)
        except OSError as exc:
            logger.warning("could not read saved KV %s: %s", known.path, exc)
            return None
        if blob.nbytes != header.get("size") or zlib.crc32(blob.data) != header.get("crc32"):
            logger.warning("%s is damaged (size or checksum)", known.path)
            return None
        return blob

    def drop(self, entry: int) -> None:
        known = self._files.pop(entry, None)
        if known is not None:
            with contextlib.suppress(OSError):
                known.path.unlink()

    def scan(self) -> list[tuple[str, list[int], str]]:
        """(tenant, tokens, name) of the files an earlier run left, oldest first; unreadable
        or foreign files and temporary leftovers are removed."""
        return [(f.tenant, f.tokens, name) for name, f in self._scan()]

    def scan_meta(self) -> list[tuple[str, list[int], dict[str, Any], str]]:
        """The same with each file's `meta` (files written without one are removed)."""
        found = []
        for name, f in self._scan():
            if f.meta is None:
                self.bind(name, None)
                continue
            found.append((f.tenant, f.tokens, f.meta, name))
        return found

    def _scan(self) -> list[tuple[str, _File]]:
        found = []
        for path in self.directory.iterdir():
            if path.name == ".lock":
                continue
            header = None
            if path.suffix == ".kv":
                with contextlib.suppress(OSError), path.open("rb") as f:
                    header = _read_header(f)
            tokens = header.get("tokens") if header is not None else None
            tenant = header.get("tenant") if header is not None else None
            meta = header.get("meta") if header is not None else None
            if (
                header is None
                or header.get("fingerprint") != self.fingerprint
                or not isinstance(tenant, str)
                or not isinstance(tokens, list)
                or not all(isinstance(t, int) for t in tokens)
                or not (meta is None or isinstance(meta, dict))
            ):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            stat = path.stat()
            found.append(
                (stat.st_mtime, path.name, _File(path, tenant, tokens, stat.st_size, meta))
            )
        found.sort(key=lambda item: item[0])
        self._found = {name: f for _, name, f in found}
        return [(name, f) for _, name, f in found]

    def bind(self, name: str, entry: int | None) -> None:
        """An earlier run's file becomes host entry `entry`; with None it is deleted."""
        found = self._found.pop(name, None)
        if found is None:
            return
        if entry is None:
            with contextlib.suppress(OSError):
                found.path.unlink()
        else:
            self._files[entry] = found

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def model_fingerprint(model_sha256: str, llama_version: str, layout: str) -> str:
    """What a saved state depends on: the weights, the llama.cpp build, the KV layout."""
    return hashlib.sha256(f"{model_sha256}|{llama_version}|{layout}".encode()).hexdigest()
