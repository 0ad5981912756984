"""The host cache's files: what is written is read back only for exactly what it stands for."""

from __future__ import annotations

import stat

import numpy as np
import pytest

from inference.kvdisk import DiskKvStore, model_fingerprint

MODEL = model_fingerprint("a" * 64, "0.3.36", "f16/unified")
OTHER_MODEL = model_fingerprint("b" * 64, "0.3.36", "f16/unified")


def blob(n: int = 5000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_a_written_entry_reads_back_byte_for_byte_and_only_its_owner_can_read_it(tmp_path):
    store = DiskKvStore(tmp_path, MODEL)
    data = blob()
    assert store.write(7, "acme", [1, 2, 3], data)
    read = store.read(7)
    assert read is not None
    assert np.array_equal(read, data)
    assert store.used_bytes > data.nbytes  # the header too
    [path] = [p for p in store.directory.iterdir() if p.suffix == ".kv"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store.drop(7)
    assert store.read(7) is None
    assert not path.exists()
    assert store.used_bytes == 0


def test_a_damaged_or_swapped_file_is_never_restored(tmp_path):
    store = DiskKvStore(tmp_path, MODEL)
    store.write(1, "acme", [1, 2, 3], blob(seed=1))
    store.write(2, "acme", [4, 5, 6], blob(seed=2))
    path1 = store._files[1].path
    path2 = store._files[2].path
    # One byte of the KV flipped: the checksum catches it.
    raw = bytearray(path1.read_bytes())
    raw[-10] ^= 0xFF
    path1.write_bytes(bytes(raw))
    assert store.read(1) is None
    # Another entry's file in its place: other tokens in the header.
    path1.write_bytes(path2.read_bytes())
    assert store.read(1) is None
    # Cut short.
    path2.write_bytes(path2.read_bytes()[:-100])
    assert store.read(2) is None


def test_a_restart_finds_what_the_last_run_left_and_drops_junk(tmp_path):
    first = DiskKvStore(tmp_path, MODEL)
    first.write(1, "acme", [1, 2, 3], blob(seed=1))
    first.write(2, "globex", [9, 8], blob(seed=2))
    (first.directory / "junk.kv").write_bytes(b"not ours")
    (first.directory / "x.part-123").write_bytes(b"a write cut by a crash")
    first.close()

    second = DiskKvStore(tmp_path, MODEL)
    assert second.directory == first.directory  # the same slot, its lock free again
    found = {(tenant, tuple(tokens)): name for tenant, tokens, name in second.scan()}
    assert set(found) == {("acme", (1, 2, 3)), ("globex", (9, 8))}
    assert sorted(p.name for p in second.directory.iterdir()) == sorted([".lock", *found.values()])
    second.bind(found[("acme", (1, 2, 3))], 10)
    second.bind(found[("globex", (9, 8))], None)  # not adopted: deleted
    read = second.read(10)
    assert read is not None
    assert np.array_equal(read, blob(seed=1))
    assert len([p for p in second.directory.iterdir() if p.suffix == ".kv"]) == 1


def test_two_workers_on_one_folder_never_share_files(tmp_path):
    a = DiskKvStore(tmp_path, MODEL)
    b = DiskKvStore(tmp_path, MODEL)
    assert a.directory != b.directory
    a.write(1, "acme", [1, 2, 3], blob())
    assert b.scan() == []


def test_another_models_files_are_removed_unless_a_running_worker_holds_them(tmp_path):
    old = DiskKvStore(tmp_path, OTHER_MODEL)
    old.write(1, "acme", [1, 2, 3], blob())
    DiskKvStore(tmp_path, MODEL)
    assert old.directory.exists()  # held by a live worker (its lock)
    old.close()
    DiskKvStore(tmp_path, MODEL)
    assert not old.directory.exists()


def test_a_full_disk_is_a_warning_and_nothing_left_behind(tmp_path, monkeypatch, caplog):
    store = DiskKvStore(tmp_path, MODEL)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("inference.kvdisk.os.replace", no_space)
    assert not store.write(1, "acme", [1, 2, 3], blob())
    assert store.read(1) is None
    assert [p.name for p in store.directory.iterdir()] == [".lock"]
    assert "No space left" in caplog.text


@pytest.mark.parametrize("header", [b"QKV1\xff\xff\xff\x7f", b"QKV1\x05\x00\x00\x00[1,2]"])
def test_headers_that_are_not_ours_are_removed_at_scan(tmp_path, header):
    store = DiskKvStore(tmp_path, MODEL)
    (store.directory / "odd.kv").write_bytes(header + b"rest")
    assert store.scan() == []
    assert not (store.directory / "odd.kv").exists()
