"""A folder on this server: a local path, or a share the OS mounted (NFS, SMB).

Only folders under QASSIST_SOURCE_FOLDERS may be synced (a tenant admin must not be able to
index /etc). The walk follows symbolic links that stay inside the folder, refuses those that
point outside it or back to a folder it is in (a loop), and never reads a file larger than the
limit: its size comes from `stat`. Files are read with the stdlib: nothing here is worth a
library.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from sources.connectors import Connector, Found, ItemError, Lookup, SourceError, readable_name
from sources.connectors import too_large as _too_large

READ_CHUNK = 1024 * 1024


def allowed_roots() -> list[Path]:
    return [Path(os.path.realpath(p)) for p in settings.QASSIST_SOURCE_FOLDERS if p]


def check_folder(location: str) -> Path:
    """The folder's real path when it may be synced; SourceError saying why not."""
    roots = allowed_roots()
    if not roots:
        raise SourceError(
            "No folder may be synced on this server: its administrator lists the folders "
            "that may be in QASSIST_SOURCE_FOLDERS."
        )
    if not location or not os.path.isabs(location):
        raise SourceError(f"“{location}” is not an absolute path (e.g. /srv/share/handbook).")
    real = Path(os.path.realpath(location))
    if not any(real == root or root in real.parents for root in roots):
        listed = ", ".join(str(r) for r in roots)
        raise SourceError(
            f"{location} is outside the folders this server may sync ({listed}): "
            "QASSIST_SOURCE_FOLDERS lists them."
        )
    if not real.exists():
        raise SourceError(f"{location} does not exist (or the share is not mounted).")
    if not real.is_dir():
        raise SourceError(f"{location} is not a folder.")
    if not os.access(real, os.R_OK | os.X_OK):
        raise SourceError(f"This server may not read {location} (permission denied).")
    return real


class FolderConnector(Connector):
    def __init__(self, *, location: str, known: Lookup, file_limit: int) -> None:
        super().__init__(known=known, file_limit=file_limit)
        self.location = location.rstrip("/") or "/"
        self.root = check_folder(location)

    def walk(self) -> Iterator[Found]:
        yield from self._walk(self.root, "", {self._identity(self.root)})

    @staticmethod
    def _identity(path: Path) -> tuple[int, int]:
        info = path.stat()
        return info.st_dev, info.st_ino

    def _inside(self, real: Path) -> bool:
        return real == self.root or self.root in real.parents

    def _walk(self, folder: Path, prefix: str, ancestors: set[tuple[int, int]]) -> Iterator[Found]:
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            self.complete = False
            yield Found(
                key=prefix or ".",
                name="",
                origin=self._origin(prefix),
                error=f"The folder could not be listed: {exc.strerror or exc}.",
            )
            return
        for name in names:
            if name.startswith("."):
                continue
            key = f"{prefix}{name}"
            path = folder / name
            try:
                info = path.lstat()
            except OSError:
                continue  # gone since the listing
            if stat.S_ISLNK(info.st_mode):
                found = self._link(path, key, ancestors)
                if isinstance(found, Found):
                    yield found
                    continue
                if found is None:
                    continue
                path = found
                info = path.stat()
            if stat.S_ISDIR(info.st_mode):
                identity = (info.st_dev, info.st_ino)
                if identity in ancestors:
                    yield self._failure(
                        key,
                        "A symbolic link loop: it leads back to a folder "
                        "it is in. It was not followed.",
                    )
                    continue
                yield from self._walk(path, f"{key}/", ancestors | {identity})
            elif stat.S_ISREG(info.st_mode) and readable_name(name):
                yield Found(
                    key=key,
                    name=name,
                    origin=self._origin(key),
                    size=info.st_size,
                    mtime=info.st_mtime,
                )

    def _link(self, path: Path, key: str, ancestors: set[tuple[int, int]]) -> Path | Found | None:
        """A symbolic link's target inside the folder; a failure to list; None: skip."""
        real = Path(os.path.realpath(path))
        if not self._inside(real):
            return self._failure(
                key, "A symbolic link to a path outside the synced folder: it was not followed."
            )
        try:
            info = real.stat()
        except OSError:
            return self._failure(key, "A symbolic link whose target does not exist.")
        if stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) in ancestors:
            return self._failure(
                key,
                "A symbolic link loop: it leads back to a folder it is in. It was not followed.",
            )
        if stat.S_ISREG(info.st_mode) and not readable_name(path.name):
            return None
        return real

    def _failure(self, key: str, reason: str) -> Found:
        return Found(key=key, name="", origin=self._origin(key), error=reason)

    def _origin(self, key: str) -> str:
        return f"{self.location}/{key}" if key and key != "." else self.location

    def read(self, found: Found) -> bytes:
        path = self.root / found.key
        real = Path(os.path.realpath(path))
        if not self._inside(real):  # changed into a link since the walk
            raise ItemError("The file now points outside the synced folder: it was not read.")
        try:
            size = real.stat().st_size
            if size > self.file_limit:
                raise ItemError(_too_large(size, self.file_limit))
            parts: list[bytes] = []
            read = 0
            with open(real, "rb") as handle:
                while chunk := handle.read(READ_CHUNK):
                    read += len(chunk)
                    if read > self.file_limit:  # it grew while being read
                        raise ItemError(_too_large(read, self.file_limit))
                    parts.append(chunk)
        except OSError as exc:
            raise ItemError(f"The file could not be read: {exc.strerror or exc}.") from None
        return b"".join(parts)
