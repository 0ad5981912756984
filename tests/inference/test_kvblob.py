"""inference.kvblob: llama.cpp's sequence state taken apart, moved and put together again. The
real format is checked against llama.cpp in tests/inference/test_real_passage_kv.py; these
build blobs of the same layout by hand."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from inference import kvblob

LAYERS, HEADS, HEAD_DIM = 2, 2, 8
ROW = HEADS * HEAD_DIM * 2  # f16 bytes per cell and layer


def make_blob(
    positions: list[int], *, v_trans: bool = False, n_stream: int = 1, seed: int = 0
) -> np.ndarray:
    """A one-sequence state as llama_state_seq_get_data writes it (magic, seq id, streams)."""
    rng = np.random.default_rng(seed)
    n = len(positions)
    out = bytearray(struct.pack("<IiI", kvblob.MAGIC, 3, n_stream))
    out += struct.pack("<I", n)
    for pos in positions:
        out += struct.pack("<iIi", pos, 1, 3)
    out += struct.pack("<II", int(v_trans), LAYERS)
    for _ in range(LAYERS):
        out += struct.pack("<iQ", kvblob.F16, ROW)
        out += rng.normal(0, 4, (n, HEADS * HEAD_DIM)).astype(np.float16).tobytes()
    for _ in range(LAYERS):
        if v_trans:
            out += struct.pack("<iII", kvblob.F16, 2, HEADS * HEAD_DIM)
            out += rng.normal(0, 1, (HEADS * HEAD_DIM, n)).astype(np.float16).tobytes()
        else:
            out += struct.pack("<iQ", kvblob.F16, ROW)
            out += rng.normal(0, 1, (n, HEADS * HEAD_DIM)).astype(np.float16).tobytes()
    out += struct.pack("<I", 0) * (n_stream - 1)
    return np.frombuffer(bytes(out), dtype=np.uint8)


ROPE = kvblob.Rope(n_rot=HEAD_DIM, head_dim=HEAD_DIM, n_head_kv=HEADS, freq_base=10000.0)
NEOX = kvblob.Rope(n_rot=HEAD_DIM, head_dim=HEAD_DIM, n_head_kv=HEADS, freq_base=1e6, neox=True)


@pytest.mark.parametrize("v_trans", [False, True])
def test_a_blob_taken_apart_and_put_together_is_the_same_bytes(v_trans: bool) -> None:
    blob = make_blob([0, 1, 2, 3], v_trans=v_trans)
    assert np.array_equal(kvblob.parse(blob, n_layer=LAYERS).to_blob(seq_id=3), blob)


def test_a_blob_of_a_stream_per_sequence_keeps_its_stream_count() -> None:
    blob = make_blob([5, 6], n_stream=4)
    cells = kvblob.parse(blob, n_layer=LAYERS)
    assert cells.n_stream == 4
    assert np.array_equal(cells.to_blob(seq_id=3), blob)


@pytest.mark.parametrize("v_trans", [False, True])
def test_a_span_is_its_positions_cells_in_position_order(v_trans: bool) -> None:
    # Cells sit in the pool in any order (a packed or assembled pool): a span sorts them.
    cells = kvblob.parse(make_blob([3, 0, 2, 1, 4], v_trans=v_trans), n_layer=LAYERS)
    span = cells.span(1, 4)
    assert list(span.positions) == [1, 2, 3]
    order = [3, 2, 0]  # where positions 1, 2, 3 are in the blob
    assert np.array_equal(span.keys[1], cells.keys[1][order])
    if v_trans:
        assert np.array_equal(span.values[0], cells.values[0][:, order])
    else:
        assert np.array_equal(span.values[0], cells.values[0][order])


def test_a_span_the_sequence_does_not_hold_whole_is_refused() -> None:
    cells = kvblob.parse(make_blob([0, 1, 3]), n_layer=LAYERS)
    with pytest.raises(kvblob.BlobError):
        cells.span(0, 4)


@pytest.mark.parametrize("rope", [ROPE, NEOX], ids=["norm", "neox"])
def test_moving_cells_rotates_their_keys_by_the_distance(rope: kvblob.Rope) -> None:
    cells = kvblob.parse(make_blob([10, 11, 12]), n_layer=LAYERS)
    moved = cells.moved(50, rope)
    assert list(moved.positions) == [50, 51, 52]
    # Values do not depend on positions; keys are rotated by 40 positions, norms kept.
    assert all(np.array_equal(a, b) for a, b in zip(moved.values, cells.values, strict=True))
    before = cells.keys[0].view(np.float16).astype(np.float32).reshape(3, HEADS, HEAD_DIM)
    after = moved.keys[0].view(np.float16).astype(np.float32).reshape(3, HEADS, HEAD_DIM)
    assert not np.allclose(before, after, atol=1e-2)
    np.testing.assert_allclose(
        np.linalg.norm(after, axis=-1), np.linalg.norm(before, axis=-1), rtol=2e-3
    )
    # Moving there and back is the identity, within f16 rounding.
    back = moved.moved(10, rope).keys[0].view(np.float16).astype(np.float32)
    np.testing.assert_allclose(back.reshape(before.shape), before, atol=2e-2)


def test_a_rotation_is_the_formula_for_one_pair() -> None:
    # One head, the first pair (i = 0): theta = delta * base^0 = delta radians.
    rope = kvblob.Rope(n_rot=2, head_dim=2, n_head_kv=1, freq_base=10000.0)
    keys = np.array([[1.0, 0.0]], dtype=np.float16)
    out = rope.rotate(keys, 3).astype(np.float32)
    np.testing.assert_allclose(out[0], [np.cos(3.0), np.sin(3.0)], atol=1e-3)
    neox = kvblob.Rope(n_rot=4, head_dim=4, n_head_kv=1, freq_base=10000.0, neox=True)
    # neox pairs dimension 0 with dimension 2 (half of n_rot away), not with dimension 1.
    out = neox.rotate(np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float16), 3).astype(np.float32)
    np.testing.assert_allclose(out[0], [np.cos(3.0), 0.0, np.sin(3.0), 0.0], atol=1e-3)


def test_dimensions_past_n_rot_are_left_alone() -> None:
    rope = kvblob.Rope(n_rot=4, head_dim=8, n_head_kv=1, freq_base=10000.0)
    keys = np.arange(8, dtype=np.float16).reshape(1, 8)
    out = rope.rotate(keys, 7)
    assert np.array_equal(out[0, 4:], keys[0, 4:])
    assert not np.array_equal(out[0, :4], keys[0, :4])


@pytest.mark.parametrize("v_trans", [False, True])
def test_concatenated_cells_hold_both_in_order(v_trans: bool) -> None:
    a = kvblob.parse(make_blob([0, 1], v_trans=v_trans, seed=1), n_layer=LAYERS)
    b = kvblob.parse(make_blob([2, 3, 4], v_trans=v_trans, seed=2), n_layer=LAYERS)
    both = kvblob.concat(a, b)
    assert list(both.positions) == [0, 1, 2, 3, 4]
    assert np.array_equal(both.keys[1][2:], b.keys[1])
    again = kvblob.parse(both.to_blob(), n_layer=LAYERS)
    assert np.array_equal(again.span(0, 2).keys[0], a.keys[0])
    assert np.array_equal(again.span(2, 5).keys[0], b.keys[0])


def test_what_is_not_this_layout_is_refused_not_misread() -> None:
    blob = make_blob([0, 1, 2])
    with pytest.raises(kvblob.BlobError):
        kvblob.parse(blob[:-3], n_layer=LAYERS)  # cut off
    with pytest.raises(kvblob.BlobError):
        kvblob.parse(blob, n_layer=LAYERS + 1)  # another model
    bad = blob.copy()
    bad[:4] = 0
    with pytest.raises(kvblob.BlobError):
        kvblob.parse(bad, n_layer=LAYERS)  # not a sequence state
    with pytest.raises(kvblob.BlobError):
        kvblob.parse(np.concatenate([blob, blob[:4]]), n_layer=LAYERS)  # bytes left over
