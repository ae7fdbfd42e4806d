import numpy as np
import pytest

from gpuemb.autograd.backend import to_host, xp
from gpuemb.store.slab import SlabAllocator
from gpuemb.store.ssd_tier import SsdTier
from gpuemb.store.tiers import DeviceTier, HostTier, TierSpec

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
        step = 4 if kind == "ssd" else 0  # the SSD tier keeps each row's int32 step beside it
        assert t.capacity == 320 and t.nbytes == 320 * (7 * np.dtype(dtype).itemsize + step)
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
