import math

import numpy as np
import pytest

from gpuemb.kernels.philox import philox4x32_10
from gpuemb.store.init import initial_weights
from gpuemb.store.options import DRAWS, Initializer


@pytest.mark.parametrize("draw", DRAWS)
@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated_normal"])
def test_a_key_gets_the_same_row_whatever_batch_or_order(kind, draw, rng):
    init = Initializer(kind, seed=11, draw=draw)
    keys = rng.integers(-2 ** 62, 2 ** 62, 500)
    whole = initial_weights(init, keys, 8)
    perm = rng.permutation(500)
    np.testing.assert_array_equal(initial_weights(init, keys[perm], 8), whole[perm])
    np.testing.assert_array_equal(initial_weights(init, keys[7:9], 8), whole[7:9])
    assert np.unique(whole, axis=0).shape[0] == 500  # distinct keys, distinct rows
    assert not np.array_equal(initial_weights(Initializer(kind, seed=12, draw=draw), keys, 8), whole)


def _words(key, counter, attempt, seed):
    """The four uniforms in (0, 1) of one Philox call of the initial rows' stream, by hand."""
    k = np.uint64(key % 2 ** 64)
    words = philox4x32_10(k & np.uint64(0xFFFFFFFF), k >> np.uint64(32), counter, attempt, seed % 2 ** 32,
                          seed >> 32)
    return [(int(w) + 0.5) / 2 ** 32 for w in words]


def test_uniform_matches_the_philox_stream_by_hand():
    key, seed = int(np.random.default_rng().integers(-2 ** 63, 2 ** 63)), 2 ** 40 + 3
    draw1 = initial_weights(Initializer("uniform", 0.5, seed, draw=1), np.array([key]), 7, "float64")[0]
    draw2 = initial_weights(Initializer("uniform", 0.5, seed, draw=2), np.array([key]), 7, "float64")[0]
    for d in range(7):  # draw 1: a call per column, word 0; draw 2: a call per four columns, word d % 4
        assert math.isclose(draw1[d], 0.5 * (2 * _words(key, d, 0, seed)[0] - 1), rel_tol=1e-12)
        assert math.isclose(draw2[d], 0.5 * (2 * _words(key, d // 4, 0, seed)[d % 4] - 1), rel_tol=1e-12)


def test_normal_draw_2_takes_two_box_muller_pairs_a_call():
    key, seed = int(np.random.default_rng().integers(-2 ** 63, 2 ** 63)), 77
    got = initial_weights(Initializer("normal", 1.5, seed), np.array([key]), 6, "float64")[0]
    want = []
    for g in range(2):
        u = _words(key, g, 0, seed)
        for a, b in ((u[0], u[1]), (u[2], u[3])):
            r = math.sqrt(-2 * math.log(a))
            want += [1.5 * r * math.cos(2 * math.pi * b), 1.5 * r * math.sin(2 * math.pi * b)]
    np.testing.assert_allclose(got, want[:6], rtol=1e-12)


def test_draw_1_is_the_stream_of_runs_before_draw_2_and_draw_2_is_the_default():
    keys = np.random.default_rng().integers(-2 ** 63, 2 ** 63, 300)
    assert Initializer().draw == DRAWS[-1] == 2
    for kind in ("uniform", "normal"):
        one = initial_weights(Initializer(kind, seed=3, draw=1), keys, 9)
        two = initial_weights(Initializer(kind, seed=3), keys, 9)
        assert np.array_equal(one[:, 0], two[:, 0])  # column 0 is word 0 (and 1) of the same call in both
        assert not np.any(one[:, 1:] == two[:, 1:])
    for bad in (0, 3, True, 2.0):
        with pytest.raises(ValueError, match=r"Initializer: draw=.*; use one of 1, 2"):
            Initializer(draw=bad)


@pytest.mark.parametrize("draw", DRAWS)
@pytest.mark.parametrize("kind, std, bound", [("uniform", 0.3 / math.sqrt(3), 0.3), ("normal", 0.3, None),
                                              ("truncated_normal", 0.3 * 0.8796, 0.6)])
def test_distributions_over_many_keys(kind, std, bound, draw):
    w = initial_weights(Initializer(kind, 0.3, seed=1, draw=draw), np.arange(20000), 16)
    assert w.dtype == np.float32 and w.shape == (20000, 16)
    assert abs(w.mean()) < 0.003 and abs(w.std() / std - 1) < 0.01
    if bound is not None:
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    else:
        assert np.abs(w).max() > 4 * 0.3  # tails reach past the truncation point
    corr = np.corrcoef(w.T)[np.triu_indices(16, 1)]
    assert np.abs(corr).max() < 0.04  # columns are independent draws, also those of one call (a cosine and a sine)


def test_default_scale_and_zeros():
    w = initial_weights(Initializer("uniform"), np.arange(5000), 64)
    assert 0.124 < np.abs(w).max() <= 0.125
    assert not initial_weights(Initializer("zeros"), np.arange(3), 4).any()


@pytest.mark.gpu
@pytest.mark.parametrize("draw", DRAWS)
def test_the_device_draws_the_rows_the_cpu_draws(draw, rng):
    from gpuemb.autograd import backend
    keys = rng.integers(-2 ** 63, 2 ** 63, 40)
    for kind in ("uniform", "normal", "truncated_normal"):
        init = Initializer(kind, float(rng.uniform(0.1, 3)), int(rng.integers(2 ** 63)), draw)
        for dtype in ("float32", "float64", "float16"):
            want = initial_weights(init, keys, 7, dtype)
            got = backend.to_host(initial_weights(init, backend.to_device(keys), 7, dtype))
            assert got.dtype == want.dtype
            if kind == "uniform" or not backend.real_gpu():  # emulated: the host's log, cos and sin
                np.testing.assert_array_equal(got, want, err_msg=f"{kind} {dtype}")
            else:  # a GPU's math library may round the last float64 bit otherwise (init.py)
                np.testing.assert_allclose(got, want, rtol=2e-3 if dtype == "float16" else 1e-6)
