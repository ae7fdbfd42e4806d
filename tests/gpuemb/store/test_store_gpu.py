"""The embedding store on a real GPU: device, host and ssd placements on CuPy against NumPy reference math.

The backend is picked at import, so these tests cannot run the same table on both paths; they recompute each
lookup and update in NumPy (float64) instead: SGD ``w - lr·Σg`` and row-wise Adagrad ``acc + mean(Σg²)``,
``w - lr·Σg / (sqrt(acc) + eps)``, with Σ over each key's duplicates in the batch.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.optim import RowwiseAdagradRule, SGDRule
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

# real shapes: minutes per test in the simulator, so they wait for real hardware; test_device_equality.py checks the
# same paths on the emulated device at small shapes
pytestmark = [pytest.mark.gpu, pytest.mark.real_gpu]

D, UNIVERSE, BATCH, STEPS = 16, 3000, 2048, 4
PLACEMENTS = {
    "device": lambda path: StoreOptions(),
    "host": lambda path: StoreOptions("host", cache_rows=BATCH, slab_rows=1024),
    "ssd": lambda path: StoreOptions("ssd", cache_rows=BATCH, host_cache_rows=BATCH + 512, ssd_path=str(path),
                                     slab_rows=1024, chunk_rows=64),
}


class Reference:
    """Every key's weights and accumulator in float64, updated by the rule's formula."""

    def __init__(self, config, keys):
        self.rule, self.lr = config.rule, config.lr
        self.w = initial_weights(config.initializer, keys, D).astype(np.float64)
        self.acc = np.full(keys.size, getattr(self.rule, "initial_accumulator_value", 0.0))
        self.steps = np.zeros(keys.size, np.int64)

    def update(self, idx, gy):
        g = np.zeros_like(self.w)
        np.add.at(g, idx, gy.astype(np.float64))
        u = np.unique(idx)
        self.steps[u] += 1
        if isinstance(self.rule, SGDRule):
            self.w[u] -= self.lr * g[u]
            return
        self.acc[u] += (g[u] ** 2).mean(axis=1)
        self.w[u] -= self.lr * g[u] / (np.sqrt(self.acc[u])[:, None] + self.rule.eps)


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("rule", [SGDRule(), RowwiseAdagradRule(initial_accumulator_value=0.1)],
                         ids=lambda r: type(r).__name__)
def test_lookups_and_updates_on_cupy_match_numpy(placement, rule, rng, tmp_path):
    config = TableConfig("t", D, rule=rule, lr=0.05, initializer=Initializer("normal", 0.5, seed=7),
                         options=PLACEMENTS[placement](tmp_path / "rows.h5"))
    table = EmbeddingTable(config)
    keys = rng.permutation(np.unique(rng.integers(-2 ** 62, 2 ** 62, 2 * UNIVERSE))[:UNIVERSE])
    ref = Reference(config, keys)
    for _ in range(STEPS):
        idx = rng.integers(0, UNIVERSE, BATCH)  # about half the keys of a batch are duplicates
        y = table.lookup(backend.to_device(keys[idx]))
        assert backend.is_device_array(y.data) and y.shape == (BATCH, D)
        np.testing.assert_allclose(to_host(y.data), ref.w[idx], rtol=1e-5, atol=1e-6)
        gy = rng.standard_normal((BATCH, D), dtype=np.float32)
        (y * Tensor(backend.to_device(gy))).sum().backward()
        ref.update(idx, gy)
    if placement != "device":
        assert table.stats()["levels"][0]["evictions"] > 0  # rows went down and came back up
    got_keys, got_rows, got_steps = map(np.concatenate, zip(*table.export()))
    assert np.array_equal(np.sort(got_keys), np.sort(keys[ref.steps > 0]))
    at = {k: i for i, k in enumerate(keys.tolist())}
    i = np.array([at[k] for k in got_keys.tolist()])
    np.testing.assert_allclose(got_rows[:, :D], ref.w[i], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_steps, ref.steps[i])
    if isinstance(rule, RowwiseAdagradRule):
        np.testing.assert_allclose(got_rows[:, D], ref.acc[i], rtol=1e-5)
    table.close()


def test_pooled_lookup_on_cupy_matches_numpy(rng):
    config = TableConfig("t", D, rule=SGDRule(), lr=0.1, initializer=Initializer("uniform", seed=1))
    table = EmbeddingTable(config)
    keys = rng.integers(-10 ** 12, 10 ** 12, 500)
    sizes = rng.integers(0, 6, 300)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    idx = rng.integers(0, keys.size, offsets[-1])
    w = initial_weights(config.initializer, keys, D).astype(np.float64)
    want = np.stack([w[idx[a:b]].sum(0) for a, b in zip(offsets[:-1], offsets[1:])])
    for mode, scale in (("sum", 1), ("mean", np.maximum(sizes, 1)[:, None])):
        with no_grad():
            y = table.lookup(backend.to_device(keys[idx]), backend.to_device(offsets), mode)
        assert backend.is_device_array(y.data)
        np.testing.assert_allclose(to_host(y.data), want / scale, rtol=1e-5, atol=1e-6)
