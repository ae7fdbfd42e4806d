import numpy as np
import pytest

from gpuemb.autograd import Tensor, bce_with_logits, no_grad
from gpuemb.nn.linear import Linear
from gpuemb.optim import SGD, AdagradRule
from gpuemb.store.collection import EmbeddingCollection, feature_keys
from gpuemb.store.options import Initializer, StoreOptions, TableConfig

D, F = 4, 3


def configs(**kw):
    return [TableConfig(f"f{f}", D, initializer=Initializer(seed=f), rule=AdagradRule(), lr=0.2, **kw)
            for f in range(F)]


def test_feature_keys_keep_features_apart(rng):
    keys = rng.integers(-2 ** 63, 2 ** 63 - 1, 5000)
    mixed = [feature_keys(keys, f) for f in range(F)]
    assert all(np.unique(m).size == np.unique(keys).size for m in mixed)
    assert np.unique(np.concatenate(mixed)).size == F * np.unique(keys).size
    np.testing.assert_array_equal(feature_keys(keys[::-1], 1), mixed[1][::-1])


@pytest.mark.parametrize("shared", [False, True])
def test_one_hot_rows_are_each_features_own(shared, rng):
    sparse = rng.integers(0, 10, (6, F))
    sparse[:, 1] = sparse[:, 0]  # the same keys in two features must still get different rows
    c = EmbeddingCollection(configs()[0], F) if shared else EmbeddingCollection(configs())
    with no_grad():
        y = c(sparse).numpy()
        assert y.shape == (6, F, D)
        for f in range(F):
            table, keys = (c.tables[0], feature_keys(sparse[:, f], f)) if shared else (c.tables[f], sparse[:, f])
            np.testing.assert_array_equal(y[:, f], table.lookup(keys).numpy())
    assert not np.array_equal(y[:, 0], y[:, 1])


@pytest.mark.parametrize("shared", [False, True])
def test_pooled_bags_per_feature(shared, rng):
    B = 5
    bags = []
    for _ in range(F):
        sizes = rng.integers(0, 4, B)
        bags.append((rng.integers(0, 20, sizes.sum()), np.concatenate([[0], np.cumsum(sizes)])))
    c = EmbeddingCollection(configs()[0], F, mode="mean") if shared else EmbeddingCollection(configs(), mode="mean")
    with no_grad():
        y = c(bags).numpy()
        assert y.shape == (B, F, D) and np.abs(y).sum() > 0
        for f, (k, o) in enumerate(bags):
            table, keys = (c.tables[0], feature_keys(k, f)) if shared else (c.tables[f], k)
            np.testing.assert_array_equal(y[:, f], table.lookup(keys, o, "mean").numpy())


@pytest.mark.parametrize("shared, placement", [(False, "device"), (True, "device"), (True, "host")])
def test_a_tiny_model_learns(shared, placement, rng):
    """Labels from a planted effect per (feature, key); the embeddings and a linear head must find it."""
    opts = StoreOptions(placement, cache_rows=128 if placement == "host" else 0)
    c = EmbeddingCollection(configs(options=opts)[0], F) if shared else EmbeddingCollection(configs(options=opts))
    head = Linear(F * D, 1, seed=1)
    opt = SGD(head.parameters(), lr=0.1)
    effect = rng.standard_normal((F, 50))
    losses = []
    for _ in range(150):
        sparse = rng.integers(0, 50, (32, F))
        labels = (effect[np.arange(F), sparse].sum(1) > 0).astype(np.float32)[:, None]
        loss = bce_with_logits(head(c(sparse).reshape(32, F * D)), Tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:20])
    assert len(c.tables[0]) == (F * 50 if shared else 50)


def test_tables_must_share_a_dim():
    with pytest.raises(ValueError, match="same dim"):
        EmbeddingCollection([TableConfig("a", 4), TableConfig("b", 8)])


@pytest.mark.parametrize("shared", [False, True])
def test_eval_mode_reads_unseen_keys_without_inserting(shared, rng):
    def build():
        return EmbeddingCollection(configs()[0], F) if shared else EmbeddingCollection(configs())

    c = build()
    seen, unseen = rng.integers(0, 50, (8, F)), rng.integers(1000, 2000, (8, F))
    y = c(seen)
    (y * Tensor(rng.standard_normal(y.shape).astype(np.float32))).sum().backward()  # the seen rows move
    sizes = [len(t) for t in c.tables]
    got = c.eval()(np.concatenate([seen, unseen])).numpy()
    assert [len(t) for t in c.tables] == sizes  # nothing inserted
    with no_grad():
        trained = c.train()(seen).numpy()
        initial = build()(unseen).numpy()  # training mode inserts, so these are the keys' initial weights
    np.testing.assert_array_equal(got[:8], trained)
    np.testing.assert_array_equal(got[8:], initial)
