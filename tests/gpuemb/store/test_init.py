import math

import numpy as np
import pytest

from gpuemb.kernels.philox import philox4x32_10
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer


@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated_normal"])
def test_a_key_gets_the_same_row_whatever_batch_or_order(kind, rng):
    init = Initializer(kind, seed=11)
    keys = rng.integers(-2 ** 62, 2 ** 62, 500)
    whole = initial_weights(init, keys, 8)
    perm = rng.permutation(500)
    np.testing.assert_array_equal(initial_weights(init, keys[perm], 8), whole[perm])
    np.testing.assert_array_equal(initial_weights(init, keys[7:9], 8), whole[7:9])
    assert np.unique(whole, axis=0).shape[0] == 500  # distinct keys, distinct rows
    assert not np.array_equal(initial_weights(Initializer(kind, seed=12), keys, 8), whole)


def test_uniform_matches_the_philox_stream_by_hand():
    key, seed, d = -5, 2 ** 40 + 3, 3
    k = np.uint64(key % 2 ** 64)
    w0 = philox4x32_10(k & np.uint64(0xFFFFFFFF), k >> np.uint64(32), d, 0, seed % 2 ** 32, seed >> 32)[0]
    want = 0.5 * (2 * (int(w0) + 0.5) / 2 ** 32 - 1)
    got = initial_weights(Initializer("uniform", 0.5, seed), np.array([key]), 4, "float64")[0, d]
    assert math.isclose(got, want, rel_tol=1e-12)


@pytest.mark.parametrize("kind, std, bound", [("uniform", 0.3 / math.sqrt(3), 0.3), ("normal", 0.3, None),
                                              ("truncated_normal", 0.3 * 0.8796, 0.6)])
def test_distributions_over_many_keys(kind, std, bound):
    w = initial_weights(Initializer(kind, 0.3, seed=1), np.arange(20000), 16)
    assert w.dtype == np.float32 and w.shape == (20000, 16)
    assert abs(w.mean()) < 0.003 and abs(w.std() / std - 1) < 0.01
    if bound is not None:
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    else:
        assert np.abs(w).max() > 4 * 0.3  # tails reach past the truncation point
    corr = np.corrcoef(w[:, 0], w[:, 1])[0, 1]
    assert abs(corr) < 0.03  # columns are independent draws


def test_default_scale_and_zeros():
    w = initial_weights(Initializer("uniform"), np.arange(5000), 64)
    assert 0.124 < np.abs(w).max() <= 0.125
    assert not initial_weights(Initializer("zeros"), np.arange(3), 4).any()
