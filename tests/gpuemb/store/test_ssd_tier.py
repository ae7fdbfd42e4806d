"""The SSD tier's own behaviour: the file plain h5py reads, steps beside rows, chunk traffic, requests in flight,
the write-back buffer and its errors (the API every tier shares is in test_tiers.py)."""
import errno
import os
import threading
import time

import h5py
import numpy as np
import pytest

from gpuemb.store import ssd_io, ssd_tier
from gpuemb.store.errors import SsdFileError
from gpuemb.store.slab import SlabAllocator
from gpuemb.store.ssd_tier import SsdTier
from gpuemb.store.tiers import TierSpec


def random_rows(rng, n, spec):
    return (rng.standard_normal((n, spec.width)) * 10).astype(spec.dtype)


def test_a_path_that_cannot_be_created(tmp_path):
    bad = tmp_path / "no" / "such" / "folder" / "rows.h5"
    with pytest.raises(OSError, match=f"cannot create the HDF5 file {bad}"):
        SsdTier(bad, TierSpec(width=4))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_plain_h5py_reads_the_same_rows_and_steps(dtype, rng, tmp_path, monkeypatch):
    monkeypatch.setattr(ssd_tier, "_GROUP_BYTES", 3 * 16 * 40)  # about three chunks per group: several a call
    spec = TierSpec(width=7, dtype=dtype, slab_rows=256, chunk_rows=16)
    t = SsdTier(tmp_path / "rows.h5", spec)
    ids = SlabAllocator(t).alloc(1000)  # 4 slabs, 64 chunks
    ref, steps = random_rows(rng, 1000, spec), rng.integers(0, 2 ** 31 - 1, 1000).astype(np.int32)
    for part in np.array_split(rng.permutation(1000), 7):
        t.write(ids[part], ref[part], steps=steps[part])
    pick = rng.integers(0, 1000, 2000)
    got, got_steps = t.read(ids[pick], with_steps=True)
    np.testing.assert_array_equal(got, ref[pick])
    np.testing.assert_array_equal(got_steps, steps[pick])
    t.close()
    with h5py.File(tmp_path / "rows.h5", "r") as f:
        rows = f["rows"]  # the virtual dataset over the slabs
        assert rows.shape == (1024,) and f.attrs["chunk_rows"] == 16 and f.attrs["version"] == 2
        np.testing.assert_array_equal(rows["row"][:][ids], ref)
        np.testing.assert_array_equal(rows["step"][:][ids], steps)
        assert not rows["row"][1000:].any()  # never written: zeros
        np.testing.assert_array_equal(f["slabs/000001"]["row"][:], ref[256:512])


def test_a_masked_write_keeps_the_other_rows_and_steps(rng, tmp_path):
    spec = TierSpec(width=3, slab_rows=64, chunk_rows=8)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        ids = SlabAllocator(t).alloc(64)
        ref, steps = random_rows(rng, 64, spec), rng.integers(0, 100, 64).astype(np.int32)
        t.write(ids, ref, steps=steps)
        where = rng.random(64) < 0.5
        new, new_steps = random_rows(rng, 64, spec), rng.integers(0, 100, 64).astype(np.int32)
        t.write(ids, new, where=where, steps=new_steps)
        ref[where], steps[where] = new[where], new_steps[where]
        got, got_steps = t.read(ids, with_steps=True)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got_steps, steps)
        t.write(ids[:4], new[:4])  # no steps given: zeros
        assert not t.read(ids[:4], with_steps=True)[1].any()


def test_it_moves_whole_chunks(rng, tmp_path):
    spec = TierSpec(width=6, dtype="float16", slab_rows=128, chunk_rows=32)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        for _ in range(4):
            t.add_slab()
        rows = rng.choice(512, 40, replace=False)
        touched = np.unique(rows // 32).size
        assert 1 < touched < 16
        t.write(rows, random_rows(rng, 40, spec))
        assert t.bytes_written == t.bytes_read == touched * t.chunk_bytes  # read-modify-write, each chunk once
        t.sync()  # the chunks leave the write-back buffer: the next read goes to the disk
        assert t.chunks_written == touched and t.pending_writes == 0
        t.read(np.concatenate([rows, rows[:5]]))
        assert t.bytes_read == 2 * touched * t.chunk_bytes and t.chunks_read == 2 * touched


def test_chunks_covered_entirely_are_written_without_a_read(rng, tmp_path, monkeypatch):
    monkeypatch.setattr(ssd_tier, "_GROUP_BYTES", 4 * 16 * 24)  # four chunks per group: full and partial mixed
    spec = TierSpec(width=5, slab_rows=128, chunk_rows=16)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        ids = SlabAllocator(t).alloc(256)  # 16 chunks
        ref = random_rows(rng, 256, spec)
        t.write(ids, ref)
        assert t.bytes_read == 0 and t.bytes_written == 16 * t.chunk_bytes
        t.sync()
        full = [1, 4, 5, 11]
        rows = np.concatenate([np.arange(c * 16, c * 16 + 16) for c in full]  # covered entirely
                              + [rng.choice(np.arange(c * 16, c * 16 + 16), 9, replace=False) for c in (0, 7, 12)])
        rows = rng.permutation(rows)
        ref[rows] = random_rows(rng, rows.size, spec)
        t.write(rows, ref[rows])
        assert t.bytes_read == 3 * t.chunk_bytes  # only the three chunks covered in part were read
        np.testing.assert_array_equal(t.read(np.arange(256)), ref)


class Slow:
    """``os.preadv``/``os.pwritev`` slowed down, counting calls and the most in flight at once."""

    def __init__(self, call, seconds):
        self.call, self.seconds, self.lock = call, seconds, threading.Lock()
        self.calls = self.now = self.most = 0

    def __call__(self, fd, buffers, offset):
        with self.lock:
            self.calls, self.now = self.calls + 1, self.now + 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds)
        try:
            return self.call(fd, buffers, offset)
        finally:
            with self.lock:
                self.now -= 1


def test_reads_are_many_in_flight_and_adjacent_chunks_are_one_call(rng, tmp_path, monkeypatch):
    spec = TierSpec(width=4, slab_rows=1024, chunk_rows=8)
    with SsdTier(tmp_path / "rows.h5", spec, threads=8) as t:
        ids = SlabAllocator(t).alloc(4096)
        ref = random_rows(rng, 4096, spec)
        t.write(ids, ref)
        t.sync()
        slow = Slow(os.preadv, 0.005)
        monkeypatch.setattr(os, "preadv", slow)
        scattered = rng.choice(512, 40, replace=False) * 8  # one row of 40 chunks, mostly apart
        np.testing.assert_array_equal(t.read(scattered), ref[scattered])
        assert slow.most > 1  # several requests in flight
        slow.calls = 0
        np.testing.assert_array_equal(t.read(np.arange(1024)), ref[:1024])  # one slab's 128 adjacent chunks
        assert slow.calls <= 8  # a call per thread's share, not per chunk


def test_rows_read_back_what_was_written_while_the_disk_is_behind(rng, tmp_path, monkeypatch):
    spec = TierSpec(width=4, slab_rows=64, chunk_rows=4)
    slow = Slow(os.pwritev, 0.02)
    monkeypatch.setattr(os, "pwritev", slow)
    with SsdTier(tmp_path / "rows.h5", spec, threads=4) as t:
        ids = SlabAllocator(t).alloc(64)
        ref, steps = random_rows(rng, 64, spec), np.arange(64, dtype=np.int32)
        t.write(ids, ref, steps=steps)
        for i in range(5):  # the same chunks again and again, while earlier writes of them are in flight
            part = rng.choice(64, 20, replace=False)
            ref[part], steps[part] = random_rows(rng, 20, spec), steps[part] + 100 * (i + 1)
            t.write(ids[part], ref[part], steps=steps[part])
            assert t.pending_writes > 0
            got, got_steps = t.read(ids, with_steps=True)
            np.testing.assert_array_equal(got, ref)
            np.testing.assert_array_equal(got_steps, steps)
    with h5py.File(tmp_path / "rows.h5", "r") as f:  # the disk ended with the newest bytes of every chunk
        np.testing.assert_array_equal(f["rows"]["row"][:][ids], ref)
        np.testing.assert_array_equal(f["rows"]["step"][:][ids], steps)


def test_the_write_back_buffer_is_bounded(rng, tmp_path, monkeypatch):
    spec = TierSpec(width=4, slab_rows=256, chunk_rows=4)
    monkeypatch.setattr(os, "pwritev", Slow(os.pwritev, 0.002))
    chunk = 4 * 20
    with SsdTier(tmp_path / "rows.h5", spec, threads=2, write_back_bytes=10 * chunk) as t:
        ids = SlabAllocator(t).alloc(256)
        for part in np.array_split(rng.permutation(256), 16):
            t.write(ids[part], random_rows(rng, part.size, spec))
            assert t.pending_writes * chunk <= 10 * chunk + 64 * chunk  # its bound, plus what one call adds


def test_a_failed_background_write_is_one_line_at_the_next_call(rng, tmp_path, monkeypatch):
    spec = TierSpec(width=4, slab_rows=64, chunk_rows=4)
    t = SsdTier(tmp_path / "rows.h5", spec)
    ids = SlabAllocator(t).alloc(64)

    def full(fd, buffers, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(SsdFileError) as e:  # at this write when its chunks fail fast enough, else at the sync
        t.write(ids, random_rows(rng, 64, spec))
        t.sync()
    message = str(e.value)
    assert "\n" not in message and str(tmp_path / "rows.h5") in message and "No space left on device" in message
    assert "--ssd-dir" in message
    with pytest.raises(SsdFileError):  # every later call
        t.read(ids[:3])
    t.close()  # quietly: the error was raised


def test_a_file_cut_short_by_another_program_is_an_error_not_zeros(rng, tmp_path):
    spec = TierSpec(width=4, slab_rows=64, chunk_rows=4)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        ids = SlabAllocator(t).alloc(128)
        t.write(ids, random_rows(rng, 128, spec))
        t.sync()
        os.truncate(tmp_path / "rows.h5", int(t._chunk_offsets(np.array([20]))[0]))
        with pytest.raises(SsdFileError, match="reading .* bytes of rows failed .*another program cut it"):
            t.read(ids[100:])


def test_jobs_split_at_gaps_and_at_the_run_limit():
    io = ssd_io.ChunkIO(-1, 1 << 18, 2, "test")  # 256 KiB chunks: four to a run
    try:
        offsets = np.array([0, 1, 2, 3, 4, 5, 9, 10]) << 18
        jobs = io._jobs(offsets[::-1].copy(), list("abcdefgh"[::-1]))
        assert [(o >> 18, b) for o, b in jobs] == [(0, list("abcd")), (4, list("ef")), (9, list("gh"))]
    finally:
        io.close()
