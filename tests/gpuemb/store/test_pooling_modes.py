"""Max pooling and weighted sums through the store: an EmbeddingTable trained by either matches a NumPy dict of
rows updated by the rule's own ``update``, and an EmbeddingCollection pools its features' bags the same way."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, no_grad
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.embedding_bag import embedding_bag_ref
from gpuemb.optim import RowwiseAdagradRule, SGDRule, init_rows, row_layout
from gpuemb.store.collection import EmbeddingCollection, feature_keys
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

D, F = 6, 3
RULES = [SGDRule(momentum=0.9), RowwiseAdagradRule()]


def config(rule=SGDRule(), name="t", seed=3):
    return TableConfig(name, D, initializer=Initializer("normal", 0.5, seed=seed), rule=rule, lr=0.05,
                       options=StoreOptions(slab_rows=16))


class Reference:
    """Full rows per key, pooled by hand and updated by the rule's own ``update``: the definition of the table."""

    def __init__(self, config):
        self.config, self.rows, self.steps = config, {}, {}

    def lookup(self, keys, offsets, mode, weights):
        for k in keys.tolist():
            if k not in self.rows:
                w = initial_weights(self.config.initializer, np.array([k]), D, self.config.dtype)
                self.rows[k], self.steps[k] = init_rows(self.config.rule, w)[0], 0
        rows = np.stack([self.rows[k][:D] for k in keys.tolist()]) if keys.size else np.zeros((0, D), np.float32)
        if weights is not None:
            rows = rows * weights[:, None]
        return np.stack([(rows[a:b].max(0) if mode == "max" else rows[a:b].sum(0)) if b > a else np.zeros(D)
                         for a, b in zip(offsets[:-1], offsets[1:])])

    def backward(self, keys, offsets, mode, weights, gy):
        grads = {k: np.zeros(D) for k in keys.tolist()}
        for b, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
            for k in range(start, end):
                if weights is not None:
                    grads[keys[k]] += weights[k] * gy[b]
            if mode == "max" and end > start:  # each column's gradient to the first key holding its max
                rows = np.stack([self.rows[key][:D] for key in keys[start:end].tolist()])
                for d, at in enumerate(rows.argmax(0)):
                    grads[keys[start + at]][d] += gy[b, d]
        rule, layout = self.config.rule, row_layout(self.config.rule, D)
        for k, g in grads.items():
            row = self.rows[k][None].astype(np.float64)
            self.steps[k] += 1
            state = {n: row[:, layout[n]] for n in rule.state_names}
            rule.update(row[:, :D], g[None], state, self.config.lr, np.array([[self.steps[k]]]))
            self.rows[k] = row[0].astype(self.rows[k].dtype)


def bags(rng, B, keyspace=12):
    """Bags of 0 to 5 keys from a small key space: empty bags, and keys repeated within and across bags."""
    sizes = rng.integers(0, 6, B)
    return rng.integers(0, keyspace, sizes.sum()) * 7919, np.concatenate([[0], np.cumsum(sizes)])


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("mode", ["max", "weighted"])
def test_training_matches_the_reference(rule, mode, rng):
    cfg = config(rule)
    table, ref = EmbeddingTable(cfg), Reference(cfg)
    pool = "max" if mode == "max" else "sum"
    for _ in range(5):
        keys, offsets = bags(rng, 9)
        weights = rng.standard_normal(keys.size).astype(np.float32) if mode == "weighted" else None
        y = table.lookup(keys, offsets, pool, weights=weights)
        np.testing.assert_allclose(to_host(y.data), ref.lookup(keys, offsets, pool, weights), rtol=1e-5, atol=1e-6)
        gy = rng.standard_normal(y.shape).astype(np.float32)
        (y * Tensor(to_device(gy))).sum().backward()
        ref.backward(keys, offsets, pool, weights, gy)
    got = {k: r for ks, rows, _ in table.export() for k, r in zip(ks.tolist(), rows)}
    assert got.keys() == ref.rows.keys()
    for k, row in ref.rows.items():
        np.testing.assert_allclose(got[k], row, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("mode", ["max", "weighted"])
def test_collection_pools_each_feature(shared, mode, rng):
    pool = "max" if mode == "max" else "sum"
    features = [bags(rng, 5) for _ in range(F)]
    if mode == "weighted":  # the last feature without weights: in a shared table its keys weigh 1
        features = [(k, o, rng.standard_normal(k.size)) for k, o in features[:-1]] + features[-1:]
    configs = [config(name=f"f{f}", seed=f) for f in range(F)]
    c = EmbeddingCollection(configs[0], F, mode=pool) if shared else EmbeddingCollection(configs, mode=pool)
    y = c(features)
    assert y.shape == (5, F, D)
    with no_grad():
        for f, (k, o, *w) in enumerate(features):
            table, keys = (c.tables[0], feature_keys(k, f)) if shared else (c.tables[f], k)
            rows = table.lookup(keys).numpy()  # inserted by the forward, not yet updated
            want = embedding_bag_ref(rows, np.arange(k.size), o, pool, w[0] if w else None)
            np.testing.assert_allclose(y.numpy()[:, f], want, rtol=1e-5, atol=1e-6)
    y.sum().backward()  # the rows' gradients reach the tables' updates


def test_bad_pooling_is_one_line_naming_the_table(rng):
    table = EmbeddingTable(config(name="clicks"))
    keys, offsets = bags(rng, 4)
    weights = rng.standard_normal(keys.size)
    for mode in ("mean", "max"):
        with pytest.raises(ValueError, match=f"^clicks.lookup: per-sample weights .* got mode='{mode}'$"):
            table.lookup(keys, offsets, mode, weights=weights)
    with pytest.raises(ValueError, match=r"^clicks.lookup: weights of shape .*; give one weight per key$"):
        table.lookup(keys, offsets, "sum", weights=np.append(weights, 1.0))
    with pytest.raises(ValueError, match=r"^clicks.lookup: pooling needs .*one of sum, mean, max.*mode='median'$"):
        table.lookup(keys, offsets, "median")
    with pytest.raises(ValueError, match="^EmbeddingCollection: mode='median'; use one of sum, mean, max$"):
        EmbeddingCollection(config(), 2, mode="median")
    c = EmbeddingCollection(config(), 2)
    with pytest.raises(ValueError, match="^EmbeddingCollection: feature 1 has weights of shape"):
        c([(keys, offsets), (keys, offsets, weights[:-1])])
    with pytest.raises(ValueError, match="^EmbeddingCollection: feature 0's bag has 1 parts"):
        c([(keys,), (keys, offsets)])
