import h5py
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host, xp
from gpuemb.store import tiers
from gpuemb.store.slab import SlabAllocator
from gpuemb.store.tiers import DeviceTier, HostTier, SsdTier, TierSpec

KINDS = ["device", "host", "ssd"]


def make(kind, spec, tmp_path):
    if kind == "ssd":
        return SsdTier(tmp_path / "rows.h5", spec)
    return DeviceTier(spec) if kind == "device" else HostTier(spec)


def random_rows(rng, n, spec):
    return (rng.standard_normal((n, spec.width)) * 10).astype(spec.dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_read_back_across_slabs(kind, dtype, rng, tmp_path):
    spec = TierSpec(width=7, dtype=dtype, slab_rows=64, chunk_rows=16)
    with make(kind, spec, tmp_path) as t:
        ids = SlabAllocator(t).alloc(300)  # five slabs, the last one part full
        assert t.capacity == 320 and t.nbytes == 320 * 7 * np.dtype(dtype).itemsize
        ref = random_rows(rng, 300, spec)
        for part in np.array_split(rng.permutation(300), 3):
            t.write(ids[part], ref[part])
        pick = rng.integers(0, 300, 1000)  # shuffled, with duplicates
        got = to_host(t.read(ids[pick]))
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, ref[pick])
        change = rng.choice(300, 50, replace=False)
        ref[change] = random_rows(rng, 50, spec)
        t.write(ids[change], ref[change])
        np.testing.assert_array_equal(to_host(t.read(ids)), ref)


@pytest.mark.parametrize("kind", KINDS)
def test_read_into_a_given_buffer(kind, rng, tmp_path):
    spec = TierSpec(width=5, slab_rows=32, chunk_rows=8)
    with make(kind, spec, tmp_path) as t:
        t.add_slab()
        t.add_slab()
        ref = random_rows(rng, 64, spec)
        t.write(np.arange(64), ref)
        out = (xp if kind == "device" else np).empty((10, 5), np.float32)
        rows = rng.integers(0, 64, 10)
        assert t.read(rows, out=out) is out
        np.testing.assert_array_equal(to_host(out), ref[rows])


@pytest.mark.parametrize("kind", KINDS)
def test_bad_arguments_name_the_numbers(kind, rng, tmp_path):
    spec = TierSpec(width=4, slab_rows=16, chunk_rows=4)
    with make(kind, spec, tmp_path) as t:
        t.add_slab()
        with pytest.raises(IndexError, match=r"row ids span \[3, 16\], outside the capacity of 16 rows"):
            t.write(np.array([3, 16]), random_rows(rng, 2, spec))
        with pytest.raises(IndexError, match=r"span \[-1, 2\]"):
            t.read(np.array([-1, 2]))
        with pytest.raises(ValueError, match=r"want values of shape \(2, 4\) and dtype float32.*\(2, 3\) float32"):
            t.write(np.array([0, 1]), rng.standard_normal((2, 3)).astype(np.float32))
        with pytest.raises(ValueError, match=r"dtype float32 for 2 rows, got \(2, 4\) float64"):
            t.write(np.array([0, 1]), rng.standard_normal((2, 4)))
        with pytest.raises(ValueError, match="want 1-D integer row ids"):
            t.read(np.array([0.0, 1.0]))


def test_spec_checks_itself():
    with pytest.raises(ValueError, match="chunk_rows=48 must divide slab_rows=64"):
        TierSpec(width=4, slab_rows=64, chunk_rows=48).validate()
    with pytest.raises(ValueError, match="not a numeric dtype"):
        TierSpec(width=4, dtype="U3").validate()


def test_ssd_path_that_cannot_be_created(tmp_path):
    bad = tmp_path / "no" / "such" / "folder" / "rows.h5"
    with pytest.raises(OSError, match=f"cannot create the HDF5 file {bad}"):
        SsdTier(bad, TierSpec(width=4))


def test_ssd_file_reads_back_with_plain_h5py(rng, tmp_path, monkeypatch):
    monkeypatch.setattr(tiers, "_GROUP_BYTES", 3 * 16 * 8 * 4)  # three chunks per group: several groups a call
    spec = TierSpec(width=8, slab_rows=256, chunk_rows=16)
    t = SsdTier(tmp_path / "rows.h5", spec)
    a = SlabAllocator(t)
    ids = a.alloc(1000)  # 4 slabs, 64 chunks
    ref = random_rows(rng, 1000, spec)
    for part in np.array_split(rng.permutation(1000), 7):
        t.write(ids[part], ref[part])
    pick = rng.integers(0, 1000, 2000)
    np.testing.assert_array_equal(t.read(ids[pick]), ref[pick])
    t.close()
    with h5py.File(tmp_path / "rows.h5", "r") as f:
        ds = f["rows"]
        assert ds.shape == (1024, 8) and ds.chunks == (16, 8) and f.attrs["chunk_rows"] == 16
        np.testing.assert_array_equal(ds[:][ids], ref)


def test_ssd_moves_whole_chunks(rng, tmp_path):
    spec = TierSpec(width=6, dtype="float16", slab_rows=128, chunk_rows=32)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        for _ in range(4):
            t.add_slab()
        rows = rng.choice(512, 40, replace=False)
        touched = np.unique(rows // 32).size
        assert 1 < touched < 16
        t.write(rows, random_rows(rng, 40, spec))
        assert t.bytes_written == t.bytes_read == touched * t.chunk_bytes  # read-modify-write, each chunk once
        again = np.concatenate([rows, rows[:5]])
        t.read(again)
        assert t.bytes_read == 2 * touched * t.chunk_bytes


def test_ssd_writes_whole_chunks_without_reading_them(rng, tmp_path, monkeypatch):
    monkeypatch.setattr(tiers, "_GROUP_BYTES", 4 * 16 * 5 * 4)  # four chunks per group: full and partial mixed
    spec = TierSpec(width=5, slab_rows=128, chunk_rows=16)
    with SsdTier(tmp_path / "rows.h5", spec) as t:
        ids = SlabAllocator(t).alloc(256)  # 16 chunks
        ref = random_rows(rng, 256, spec)
        t.write(ids, ref)
        assert t.bytes_read == 0 and t.bytes_written == 16 * t.chunk_bytes
        full = [1, 4, 5, 11]
        rows = np.concatenate([np.arange(c * 16, c * 16 + 16) for c in full]  # covered entirely
                              + [rng.choice(np.arange(c * 16, c * 16 + 16), 9, replace=False) for c in (0, 7, 12)])
        rows = rng.permutation(rows)
        ref[rows] = random_rows(rng, rows.size, spec)
        t.write(rows, ref[rows])
        assert t.bytes_read == 3 * t.chunk_bytes  # only the three chunks covered in part were read
        np.testing.assert_array_equal(t.read(np.arange(256)), ref)
