"""The runtime's initial weights of absent keys equal the store's, bit for bit, for every kind and dtype; and the
key mixing of shared tables equals the collection's."""
import dataclasses

import numpy as np
import pytest

from gpuemb.serve.initial import DRAWS, KINDS, initial_weights
from gpuemb.serve.keys import feature_keys
from gpuemb.store import init
from gpuemb.store.collection import feature_keys as store_feature_keys
from gpuemb.store import options
from gpuemb.store.options import Initializer


@pytest.mark.parametrize("draw", DRAWS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("kind", KINDS)
def test_initial_weights_equal_the_store(kind, dtype, draw):
    rng = np.random.default_rng()
    keys = rng.integers(-2 ** 63, 2 ** 63 - 1, 4000)
    cfg = Initializer(kind, None if kind == "uniform" else float(rng.uniform(0.1, 2)), int(rng.integers(2 ** 63)),
                      draw)
    want = init.initial_weights(cfg, keys, 13, dtype)
    meta = dataclasses.asdict(cfg)
    if draw == 1:  # as a version 2 bundle holds it: no draw
        del meta["draw"]
    got = initial_weights(meta, keys, 13, dtype)
    assert got.dtype == want.dtype
    if dtype == "float64" and kind in ("normal", "truncated_normal"):
        # NumPy's log and cos may round the last float64 bit otherwise than numba's (about 1 element in 1000);
        # cast to a table's float32 or float16 that never shows
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    else:
        assert np.array_equal(got, want)
    assert kind == "zeros" or np.std(got) > 0


def test_feature_keys_equal_the_collection():
    sparse = np.random.default_rng().integers(-2 ** 63, 2 ** 63 - 1, (64, 9))
    want = store_feature_keys(sparse, np.arange(9))
    got = feature_keys(sparse, np.arange(9))
    assert np.array_equal(got, want) and not np.array_equal(got, sparse)


def test_the_runtime_knows_the_stores_draws():
    assert DRAWS == options.DRAWS and set(KINDS) == set(options.INIT_KINDS)
