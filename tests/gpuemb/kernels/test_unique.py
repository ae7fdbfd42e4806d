"""The store's unique keys against ``np.unique``: sorted distinct keys and each key's index, bit for bit."""
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.kernels.unique import unique_keys, unique_keys_ref


def _cases(rng):
    yield np.zeros(0, np.int64)
    yield np.array([7], np.int64)
    yield np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max, -1, np.iinfo(np.int64).min])
    yield rng.integers(-(1 << 62), 1 << 62, 5000)  # nearly all distinct
    yield np.minimum(rng.zipf(1.1, 200_000), 10_000) * -7919  # hot keys repeated, negative
    yield rng.integers(0, 3, (64, 9))  # a matrix: flattened


def test_unique_keys_equal_np_unique(rng, xp):
    for keys in _cases(rng):
        want_u, want_i = unique_keys_ref(keys)
        got_u, got_i = unique_keys(xp.asarray(keys))
        np.testing.assert_array_equal(to_host(got_u), want_u)
        np.testing.assert_array_equal(to_host(got_i), want_i.ravel())
        assert to_host(got_i).dtype == np.int64


def test_colliding_hashes_still_separate_keys():
    """Keys that share the top bits of their Fibonacci hash probe past each other."""
    from gpuemb.kernels.unique import _GOLDEN
    base = np.arange(1, 200, dtype=np.uint64)
    keys = (base * (np.uint64(1) << np.uint64(58))).view(np.int64)  # low bits zero: a bad hash would collide
    keys = np.concatenate([keys, keys[::-1], keys[:50]])
    u, i = unique_keys(keys)
    np.testing.assert_array_equal(u, np.unique(keys))
    np.testing.assert_array_equal(u[i], keys)
    assert _GOLDEN % np.uint64(2) == 1  # odd: the multiplication is a bijection of 64-bit keys


def test_too_many_keys_is_one_line():
    class Huge:
        size = 1 << 30
    with pytest.raises(ValueError, match="split the batch below 2\\*\\*30 keys"):
        unique_keys(Huge())
