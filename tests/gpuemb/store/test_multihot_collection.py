"""A collection over multi-hot features: a fixed hotness per feature (``sparse [B, sum(hotness)]``) and jagged
features train exactly as the same bags given as ``(keys, offsets)`` lists, which the table tests check against a
NumPy reference; single-hot jagged features take the gather path; a prefetch of the same batch is taken over."""
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.optim import AdagradRule
from gpuemb.store import EmbeddingCollection, TableConfig

HOT, D, B = (3, 1, 5), 4, 6


def _collection(shared, hotness=None):
    rule = AdagradRule()
    if shared:
        return EmbeddingCollection(TableConfig("t", D, rule=rule, lr=0.3), n_features=len(HOT), hotness=hotness)
    return EmbeddingCollection([TableConfig(f"f{i}", D, rule=rule, lr=0.3) for i in range(len(HOT))],
                               hotness=hotness)


def _bags(sparse):
    """The same batch as F (keys, offsets) lists: row b's keys of feature f are its f-th run of columns."""
    ends = np.cumsum(HOT)
    return [(sparse[:, e - h:e].reshape(-1), np.arange(B + 1) * h) for h, e in zip(HOT, ends)]


def _rows(collection):
    return {t.config.name: sorted((int(k), r.tobytes()) for ks, rs, _ in t.export() for k, r in zip(ks, rs))
            for t in collection.tables}


@pytest.mark.parametrize("shared", [False, True], ids=["per-feature", "shared"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_fixed_hotness_trains_as_bag_lists(shared, mode, rng):
    fixed, lists, jagged = _collection(shared, HOT), _collection(shared), _collection(shared)
    for c in (fixed, lists, jagged):
        c.mode = mode
    names = tuple(f"f{i}" for i in range(len(HOT)))
    for _ in range(4):
        sparse = rng.integers(0, 12, (B, sum(HOT)))  # few ids: repeats within and across bags
        bags = _bags(sparse)
        lengths = np.array([[h] * B for h in HOT])
        feats = JaggedFeatures.from_lengths(names, np.concatenate([k for k, _ in bags]), lengths)
        outs = [fixed(sparse), lists(bags), jagged(feats)]
        assert outs[0].shape == (B, len(HOT), D)
        for out in outs[1:]:
            np.testing.assert_array_equal(to_host(out.data), to_host(outs[0].data))
        g = rng.standard_normal((B, len(HOT), D)).astype(np.float32)
        for out in outs:
            out.backward(g)
    assert _rows(fixed) == _rows(lists) == _rows(jagged)
    assert sum(len(t) for t in fixed.tables) > 0


def test_single_hot_jagged_features_take_the_gather_path(rng):
    dense, jag = _collection(False), _collection(False)
    sparse = rng.integers(0, 1 << 40, (B, len(HOT)))
    feats = JaggedFeatures.from_dense(("a", "b", "c"), sparse)
    np.testing.assert_array_equal(to_host(jag(feats).data), to_host(dense(sparse).data))


@pytest.mark.parametrize("shared", [False, True], ids=["per-feature", "shared"])
def test_a_prefetch_of_the_batch_is_taken_over(shared, rng):
    c = _collection(shared, HOT)
    sparse = rng.integers(0, 1 << 40, (B, sum(HOT)))
    for store, keys, tags in c.table_keys(sparse):
        assert store.prefetch(keys, tags=tags)
    out = c(sparse)
    assert all(not s.in_flight.prefetched for s in c.stores)  # each lookup took its prefetch over
    out.backward(np.ones(out.shape, np.float32))
    assert all(s.in_flight.pinned == 0 for s in c.stores)


def test_bad_hotness_and_shapes_are_one_line(rng):
    with pytest.raises(ValueError, match=r"hotness=\(3, 0, 5\); give one int >= 1 per feature"):
        _collection(False, (3, 0, 5))
    with pytest.raises(ValueError, match=r"hotness=\(3, 1\)"):
        _collection(False, (3, 1))
    with pytest.raises(ValueError, match=r"with hotness \(3, 1, 5\): \[B, 9\]"):
        _collection(False, HOT)(rng.integers(0, 9, (B, 3)))
    assert _collection(False, (1, 1, 1)).hotness is None  # all one: the single-hot fast path


@pytest.mark.parametrize("shared", [False, True], ids=["per-feature", "shared"])
def test_weighted_jagged_features_pool_as_weighted_bag_lists(shared, rng):
    jag, lists = _collection(shared), _collection(shared)
    names = tuple(f"f{i}" for i in range(len(HOT)))
    lengths = rng.integers(0, 4, (len(HOT), B))
    values = rng.integers(0, 30, lengths.sum())
    weights = rng.random(values.size).astype(np.float32)
    feats = JaggedFeatures.from_lengths(names, values, lengths, weights)
    got, want = jag(feats), lists([feats.feature(f) for f in range(len(HOT))])
    np.testing.assert_array_equal(to_host(got.data), to_host(want.data))
    assert np.abs(to_host(got.data)).sum() > 0
    g = rng.standard_normal(got.shape).astype(np.float32)
    got.backward(g)
    want.backward(g)
    assert _rows(jag) == _rows(lists)
