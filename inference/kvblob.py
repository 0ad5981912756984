"""A sequence's KV as llama.cpp saves it, taken apart: cells picked by position, moved to other
positions, put together again. numpy only, no llama.cpp: the runner hands blobs in and out.

Why here and not in llama.cpp: `llama_memory_seq_add` moves a sequence's positions, but the
rotation of the keys it implies (the "K-shift") is applied at the next `llama_decode` to *every*
cell of the context, all layers: about a second for a 32,768-cell pool on 2 cores (measured on
qwen2.5-coder-0.5b, 2026-12-03), and it re-reserves the compute graph. Placing a 250-token
passage's precomputed KV at another position would cost more than computing it. So qassist
rotates the keys of the moved cells only, here, in the saved state (a few ms for a passage).

The layout of `llama_state_seq_get_data` for one sequence (llama.cpp's
`llama_kv_cache::state_write`, the version llama-cpp-python 0.3.36 vendors):

    u32 magic 0xaf143cd8, i32 seq_id      (llama_context::state_seq_get_data)
    u32 n_stream
    per stream: u32 cell_count, and when it is not 0:
        cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id)
        u32 v_trans, u32 n_layer
        per layer: i32 k_type, u64 k_row_bytes, cell_count rows of keys
        v_trans = 0: per layer: i32 v_type, u64 v_row_bytes, cell_count rows of values
        v_trans = 1: per layer: i32 v_type, u32 v_el_bytes, u32 n_embd_v, then n_embd_v
                     columns of cell_count elements

Only what qassist's models use is accepted: one sequence, keys in f16, no per-cell extras
(M-RoPE's 2D positions), RoPE "norm" (Llama) or "neox" (Qwen2) without YaRN or frequency
factors. Anything else raises `BlobError`; the caller then computes instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

F16 = 1  # ggml_type of an f16 tensor
MAGIC = 0xAF143CD8  # llama_context's io_magic, first in a sequence's state
Blob = np.ndarray[Any, np.dtype[np.uint8]]


class BlobError(ValueError):
    """A state blob this module cannot take apart (another layout, a cut-off blob)."""


@dataclass(frozen=True)
class Rope:
    """How the model rotates keys by position (ggml's rope: theta_i = p * base^(-2i / n_rot))."""

    n_rot: int  # dimensions rotated at the start of each head
    head_dim: int
    n_head_kv: int
    freq_base: float
    freq_scale: float = 1.0
    neox: bool = False  # pairs (i, i + n_rot / 2) instead of (2i, 2i + 1)

    def rotate(self, keys: np.ndarray[Any, Any], delta: int) -> np.ndarray[Any, Any]:
        """f16 keys `[cells, n_head_kv * head_dim]` rotated as if `delta` positions later."""
        if delta == 0:
            return keys
        half = self.n_rot // 2
        # The same float32 steps as ggml_rope_cache_init: theta *= theta_scale, pair by pair.
        theta_scale = np.float32(self.freq_base) ** np.float32(-2.0 / self.n_rot)
        theta = np.empty(half, dtype=np.float32)
        t = np.float32(delta)
        for i in range(half):
            theta[i] = t
            t = np.float32(t * theta_scale)
        theta = (theta * np.float32(self.freq_scale)).astype(np.float64)
        cos, sin = np.cos(theta), np.sin(theta)
        x = keys.reshape(len(keys), self.n_head_kv, self.head_dim).astype(np.float64)
        if self.neox:
            a, b = x[..., :half], x[..., half : self.n_rot]
        else:
            a, b = x[..., 0 : self.n_rot : 2], x[..., 1 : self.n_rot : 2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        out = x.copy()
        if self.neox:
            out[..., :half], out[..., half : self.n_rot] = ra, rb
        else:
            out[..., 0 : self.n_rot : 2], out[..., 1 : self.n_rot : 2] = ra, rb
        return out.astype(np.float16).reshape(keys.shape)


@dataclass(frozen=True)
class Cells:
    """One sequence's cells: positions, and per layer the keys and values of each cell."""

    n_stream: int
    positions: np.ndarray[Any, np.dtype[np.int32]]  # [cells]
    k_types: tuple[int, ...]
    keys: tuple[np.ndarray[Any, Any], ...]  # per layer: [cells, k_row_bytes] uint8
    v_trans: bool
    v_types: tuple[int, ...]
    v_sizes: tuple[int, ...]  # per layer: row bytes (v_trans 0) or element bytes (v_trans 1)
    # Per layer: [cells, v_row_bytes] uint8, or with v_trans [n_embd_v, cells, v_el_bytes].
    values: tuple[np.ndarray[Any, Any], ...]

    def __len__(self) -> int:
        return len(self.positions)

    def take(self, index: np.ndarray[Any, Any]) -> Cells:
        """The cells at `index` (in that order)."""
        values = tuple(v[:, index] if self.v_trans else v[index] for v in self.values)
        return replace(
            self,
            positions=self.positions[index],
            keys=tuple(k[index] for k in self.keys),
            values=values,
        )

    def span(self, start: int, end: int) -> Cells:
        """The cells at positions [start, end), in position order; BlobError unless each of
        those positions is there exactly once."""
        inside = np.flatnonzero((self.positions >= start) & (self.positions < end))
        ordered = inside[np.argsort(self.positions[inside], kind="stable")]
        found = self.positions[ordered]
        if len(found) != end - start or not np.array_equal(found, np.arange(start, end)):
            raise BlobError(f"the sequence does not hold positions {start}..{end - 1} once each")
        return self.take(ordered)

    def moved(self, to: int, rope: Rope) -> Cells:
        """These cells (positions in order, from `positions[0]`) moved to start at `to`: the
        positions rewritten and every layer's keys rotated by the difference."""
        if not len(self):
            return self
        delta = to - int(self.positions[0])
        if delta == 0:
            return self
        if any(t != F16 for t in self.k_types):
            raise BlobError("only f16 keys can be rotated")
        keys = []
        for k in self.keys:
            rotated = rope.rotate(k.view(np.float16), delta)
            keys.append(np.ascontiguousarray(rotated).view(np.uint8))
        return replace(self, positions=self.positions + np.int32(delta), keys=tuple(keys))

    def to_blob(self, seq_id: int = 0) -> Blob:
        """A blob `llama_state_seq_set_data` reads (the sequence id in it is ignored there)."""
        n = len(self)
        out = bytearray(struct.pack("<IiI", MAGIC, seq_id, self.n_stream))
        out += struct.pack("<I", n)
        if n:
            meta = np.zeros(n, dtype=[("pos", "<i4"), ("n", "<u4"), ("seq", "<i4")])
            meta["pos"], meta["n"], meta["seq"] = self.positions, 1, seq_id
            out += meta.tobytes()
            out += struct.pack("<II", int(self.v_trans), len(self.keys))
            for k_type, k in zip(self.k_types, self.keys, strict=True):
                out += struct.pack("<iQ", k_type, k.shape[1])
                out += np.ascontiguousarray(k).tobytes()
            for v_type, size, v in zip(self.v_types, self.v_sizes, self.values, strict=True):
                if self.v_trans:
                    out += struct.pack("<iII", v_type, size, v.shape[0])
                else:
                    out += struct.pack("<iQ", v_type, size)
                out += np.ascontiguousarray(v).tobytes()
        # The other streams (a stream per sequence) are empty.
        out += struct.pack("<I", 0) * (self.n_stream - 1)
        return np.frombuffer(bytes(out), dtype=np.uint8)


def concat(first: Cells, second: Cells) -> Cells:
    """The cells of both (a sequence's own, then a passage placed after them)."""
    if not len(first):
        return second
    if not len(second):
        return first
    if (first.k_types, first.v_types, first.v_sizes, first.v_trans) != (
        second.k_types,
        second.v_types,
        second.v_sizes,
        second.v_trans,
    ):
        raise BlobError("the two sets of cells come from different layouts")
    axis = 1 if first.v_trans else 0
    return replace(
        first,
        positions=np.concatenate([first.positions, second.positions]),
        keys=tuple(np.concatenate([a, b]) for a, b in zip(first.keys, second.keys, strict=True)),
        values=tuple(
            np.concatenate([a, b], axis=axis)
            for a, b in zip(first.values, second.values, strict=True)
        ),
    )


class _Reader:
    def __init__(self, blob: Blob) -> None:
        self.data = memoryview(
            np.ascontiguousarray(blob).tobytes() if not blob.flags.c_contiguous else blob.data
        ).cast("B")
        self.at = 0

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise BlobError("the blob ends early")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def array(self, shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray[Any, Any]:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self.at + count > len(self.data):
            raise BlobError("the blob ends early")
        out = np.frombuffer(self.data, dtype=dtype, count=count // np.dtype(dtype).itemsize,
                            offset=self.at).reshape(shape)  # fmt: skip
        self.at += count
        return out


def parse(blob: Blob, *, n_layer: int) -> Cells:
    """Take a one-sequence blob apart; BlobError when it is not the layout above (with
    `n_layer` layers), so that a change of llama.cpp's format is refused, not misread."""
    r = _Reader(blob)
    magic, _seq, n_stream = r.unpack("<IiI")
    if magic != MAGIC:
        raise BlobError("not a sequence state (magic)")
    if not 1 <= n_stream <= 256:
        raise BlobError(f"{n_stream} streams")
    found: Cells | None = None
    for _ in range(n_stream):
        (count,) = r.unpack("<I")
        if count == 0:
            continue
        if found is not None:
            raise BlobError("cells in more than one stream")
        meta = r.array((count,), np.dtype([("pos", "<i4"), ("n", "<u4"), ("seq", "<i4")]))
        if not np.all(meta["n"] == 1):
            raise BlobError("cells of more than one sequence, or per-cell extras")
        v_trans, layers = r.unpack("<II")
        if layers != n_layer or v_trans not in (0, 1):
            raise BlobError(f"{layers} layers (expected {n_layer}), v_trans {v_trans}")
        k_types, keys = [], []
        for _ in range(layers):
            k_type, row = r.unpack("<iQ")
            k_types.append(k_type)
            keys.append(r.array((count, row)))
        v_types, v_sizes, values = [], [], []
        for _ in range(layers):
            if v_trans:
                v_type, el, n_embd = r.unpack("<iII")
                values.append(r.array((n_embd, count, el)))
                v_sizes.append(el)
            else:
                v_type, row = r.unpack("<iQ")
                values.append(r.array((count, row)))
                v_sizes.append(row)
            v_types.append(v_type)
        found = Cells(
            n_stream=n_stream,
            positions=meta["pos"].astype(np.int32),
            k_types=tuple(k_types),
            keys=tuple(keys),
            v_trans=bool(v_trans),
            v_types=tuple(v_types),
            v_sizes=tuple(v_sizes),
            values=tuple(values),
        )
    if r.at != len(r.data):
        raise BlobError(f"{len(r.data) - r.at} bytes left over")
    if found is None:
        raise BlobError("the blob holds no cells")
    return found
