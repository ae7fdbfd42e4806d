"""Table-batched stores: tables of one row format share one store, and train bit for bit as tables of their own.

Each test takes ``xp`` so that it runs on the CPU and again, in the emulated pass, on the device: the store's
arrays live on the backend's device either way.
"""
import dataclasses

import numpy as np
import pytest

from gpuemb.autograd import backend, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.optim import RowwiseAdagradRule, SGDRule
from gpuemb.store import EmbeddingCollection, StoreOptions, TableConfig
from gpuemb.store.batched import BatchedTable, batch_key
from gpuemb.store.options import EvictionRule
from gpuemb.store.mixing import feature_keys, unmixed
from gpuemb.store.snapshot import load_snapshot, save_snapshot

D, B = 4, 12


def configs(n, **kw):
    return [TableConfig(f"t{i}", D, rule=RowwiseAdagradRule(), lr=0.3, **kw) for i in range(n)]


def rows_of(table):
    """Every key of ``table`` with its full row and steps, sorted by key."""
    parts = list(table.export())
    keys = np.concatenate([k for k, _, _ in parts])
    order = np.argsort(keys)
    return (keys[order], np.concatenate([r for _, r, _ in parts])[order],
            np.concatenate([s for _, _, s in parts])[order])


def train(collection, batches, seed=0):
    """A few steps of a made-up loss, whose gradient is the rows times fixed random weights."""
    rng = np.random.default_rng(seed)
    outs = []
    for sparse in batches:
        out = collection(sparse)
        outs.append(to_host(out.data).copy())
        out.backward(backend.to_device(rng.standard_normal(out.shape).astype(np.float32)))
    return outs


def assert_same_tables(a, b):
    for ta, tb in zip(a.tables, b.tables):
        assert ta.config.name == tb.config.name and len(ta) == len(tb) > 0
        for x, y in zip(rows_of(ta), rows_of(tb)):
            np.testing.assert_array_equal(x, y)


def test_mixing_is_undone_by_its_inverse(rng):
    keys = rng.integers(-2 ** 63, 2 ** 63 - 1, 20000)
    spaces = rng.integers(0, 300, keys.size)
    mixed = feature_keys(keys, spaces)
    np.testing.assert_array_equal(unmixed(mixed, spaces), keys)
    assert (unmixed(mixed, spaces + 1) != keys).mean() > 0.99  # another table's inverse gives other keys


def test_tables_that_differ_only_in_name_share_one_store():
    c = EmbeddingCollection(configs(26))
    assert len(c.stores) == 1 and c.stores[0].n_tables == 26
    assert [t.config.name for t in c.tables] == [f"t{i}" for i in range(26)]
    assert all(isinstance(t, BatchedTable) and t.store is c.stores[0] for t in c.tables)
    other = configs(4)
    other[2] = dataclasses.replace(other[2], lr=0.1)  # its own rule settings: a store of its own
    other[3] = dataclasses.replace(other[3], options=StoreOptions(max_rows=100))  # a bound of its own
    c = EmbeddingCollection(other)
    assert sorted(s.n_tables for s in c.stores) == [1, 1, 2]
    assert batch_key(other[3]) is None and batch_key(dataclasses.replace(other[0], admit_after=3)) is None
    assert batch_key(dataclasses.replace(other[0], evict=EvictionRule(ttl_steps=5))) is None
    assert len(EmbeddingCollection(configs(5), batched=False).stores) == 5


@pytest.mark.parametrize("kind", ["single-hot", "multi-hot", "bags", "jagged", "mixed-dims"])
def test_a_batched_collection_trains_bit_for_bit_as_tables_of_their_own(kind, xp, rng):
    F = 5
    cfgs = configs(F)
    hotness = None
    if kind == "multi-hot":
        hotness = (3, 1, 2, 4, 1)
    if kind == "mixed-dims":  # two dims: two stores, whose rows are put back in the features' order
        cfgs = [dataclasses.replace(c, dim=D if i % 2 else 2 * D) for i, c in enumerate(cfgs)]
    made = [EmbeddingCollection(cfgs, hotness=hotness, mixed_dims=kind == "mixed-dims", batched=b,
                                mode="mean" if kind == "bags" else "sum") for b in (True, False)]
    assert len(made[0].stores) == (2 if kind == "mixed-dims" else 1) and len(made[1].stores) == F
    batches = [make_batch(kind, F, hotness, rng, xp) for _ in range(4)]
    for x, y in zip(*(train(c, batches) for c in made)):
        np.testing.assert_array_equal(x, y)
    assert_same_tables(*made)


def make_batch(kind, F, hotness, rng, xp):
    if kind in ("single-hot", "mixed-dims"):
        return xp.asarray(rng.integers(0, 30, (B, F)))
    if kind == "multi-hot":
        return xp.asarray(rng.integers(0, 30, (B, sum(hotness))))
    lengths = rng.integers(0, 4, (F, B))
    values = rng.integers(0, 30, lengths.sum())
    if kind == "jagged":
        return JaggedFeatures.from_lengths([f"f{f}" for f in range(F)], xp.asarray(values), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths.ravel())])
    return [(values[offsets[f * B]:offsets[(f + 1) * B]], offsets[f * B:(f + 1) * B + 1] - offsets[f * B])
            for f in range(F)]


def test_each_table_keeps_its_own_keys_rows_and_dirty_keys(rng):
    c = EmbeddingCollection(configs(3))
    sparse = rng.integers(0, 50, (B, 3))
    sparse[:, 1] = sparse[:, 0]  # the same keys in two tables are two rows
    train(c, [sparse])
    for f, t in enumerate(c.tables):
        np.testing.assert_array_equal(np.sort(np.concatenate(list(t.keys()))), np.unique(sparse[:, f]))
        np.testing.assert_array_equal(t.dirty_keys(), np.unique(sparse[:, f]))
        assert len(t) == np.unique(sparse[:, f]).size and t.stats()["keys"] == len(t)
    assert not np.array_equal(rows_of(c.tables[0])[1], rows_of(c.tables[1])[1])
    c.tables[0].clear_dirty()
    assert c.tables[0].dirty_keys().size == 0 and c.tables[1].dirty_keys().size == np.unique(sparse[:, 1]).size
    gone = np.unique(sparse[:, 2])[:3]
    assert c.tables[2].delete(gone) == 3
    assert np.intersect1d(np.concatenate(list(c.tables[2].keys())), gone).size == 0
    assert len(c.tables[1]) == np.unique(sparse[:, 1]).size  # the other tables keep theirs
    with pytest.raises(ValueError, match="t0.evict: a table batched with others evicts nothing"):
        c.tables[0].evict(EvictionRule(min_count=2))


def test_a_snapshot_moves_between_batched_and_separate_tables(tmp_path, rng):
    batched, alone = (EmbeddingCollection(configs(4), batched=b) for b in (True, False))
    batches = [rng.integers(0, 40, (B, 4)) for _ in range(3)]
    train(batched, batches)
    save_snapshot(batched.tables, tmp_path / "s.h5")
    load_snapshot(alone.tables, [tmp_path / "s.h5"])
    assert_same_tables(batched, alone)
    again = EmbeddingCollection(configs(4))
    load_snapshot(again.tables, [tmp_path / "s.h5"])
    more = [rng.integers(0, 60, (B, 4)) for _ in range(2)]  # new keys too: drawn from each table's own keys
    for x, y in zip(train(again, more, seed=1), train(alone, more, seed=1)):
        np.testing.assert_array_equal(x, y)
    assert_same_tables(again, alone)


def test_a_host_store_shares_one_cache_of_the_tables_sum(rng):
    opts = StoreOptions("host", cache_rows=64, slab_rows=256)
    made = [EmbeddingCollection(configs(3, options=opts), batched=b) for b in (True, False)]
    assert made[0].stores[0].top.bound == 3 * 64
    batches = [rng.integers(0, 200, (B, 3)) for _ in range(5)]
    for x, y in zip(*(train(c, batches) for c in made)):
        np.testing.assert_array_equal(x, y)
    assert_same_tables(*made)


def test_an_evaluation_read_draws_each_tables_own_initial_rows(rng):
    made = [EmbeddingCollection(configs(3), batched=b) for b in (True, False)]
    sparse = rng.integers(0, 1000, (B, 3))
    for c in made:
        c.eval()
    with no_grad():
        x, y = (to_host(c(backend.to_device(sparse)).data) for c in made)
    np.testing.assert_array_equal(x, y)
    assert all(len(t) == 0 for c in made for t in c.tables)  # an evaluation inserts nothing


def test_a_table_id_out_of_range_is_one_line(rng):
    c = EmbeddingCollection(configs(3))
    keys = rng.integers(0, 9, 6)
    with pytest.raises(ValueError, match=r"tags span \[0, 3\]; this store holds tables 0 to 2"):
        c.stores[0].lookup(keys, tags=np.array([0, 1, 2, 3, 0, 1], np.int32))
    with pytest.raises(ValueError, match="holds one table: give no tags"):
        EmbeddingCollection(configs(1)).stores[0].lookup(keys, tags=np.zeros(6, np.int32))
    with pytest.raises(ValueError, match=r"6 keys and 5 tags"):
        c.stores[0].lookup(keys, tags=np.zeros(5, np.int32))


def test_sgd_tables_batch_too(rng):
    cfgs = [TableConfig(f"s{i}", D, rule=SGDRule(), lr=0.5) for i in range(6)]
    made = [EmbeddingCollection(cfgs, batched=b) for b in (True, False)]
    batches = [rng.integers(0, 25, (B, 6)) for _ in range(3)]
    for x, y in zip(*(train(c, batches) for c in made)):
        np.testing.assert_array_equal(x, y)
    assert_same_tables(*made)


def test_the_store_closes_with_the_last_of_its_tables(rng):
    c = EmbeddingCollection(configs(3))
    sparse = rng.integers(0, 50, (B, 3))
    train(c, [sparse])
    c.tables[0].close()
    np.testing.assert_array_equal(np.sort(np.concatenate(list(c.tables[1].keys()))), np.unique(sparse[:, 1]))
    assert rows_of(c.tables[1])[1].shape == (np.unique(sparse[:, 1]).size, c.stores[0].format.width)
    c.tables[1].close()
    c.tables[2].close()
    assert c.stores[0].top.tier.capacity == 0  # its tiers are closed now


def test_a_group_whose_rows_cannot_fit_says_what_each_table_needs(rng, xp):
    """A store of 3 host tables of ``cache_rows=4`` has one cache of 12 rows: 30 new keys in a batch do not fit,
    and the one line names each table's setting, not the sum, with the per-table figure that fits."""
    def collection(cache_rows):
        return EmbeddingCollection(configs(3, options=StoreOptions("host", cache_rows=cache_rows)))
    sparse = np.arange(30).reshape(10, 3) * 7 + rng.integers(0, 7)
    small = collection(4)
    assert len(small.stores) == 1
    with pytest.raises(Exception, match=r"^DeviceTier: 30 new rows do not fit in cache_rows=12, the sum of 3 batched "
                                        r"tables' cache_rows \(4 each\): .*; raise each table's cache_rows to at least "
                                        r"10, or make batches with fewer unique keys$") as e:
        small(backend.to_device(sparse))
    assert type(e.value).__name__ == "StoreFullError" and "\n" not in str(e.value)
    made = [collection(10), EmbeddingCollection(configs(3, options=StoreOptions("host", cache_rows=10)),
                                                batched=False)]
    batches = [sparse, rng.integers(0, 40, (10, 3))]
    for x, y in zip(*(train(c, batches) for c in made)):  # the advised figure fits, and trains as tables alone
        np.testing.assert_array_equal(x, y)
    assert_same_tables(*made)


def test_tables_of_mixed_dtypes_are_separate_stores_and_train_as_alone(rng, xp):
    """float16 rows and float32 rows are two row formats: the float16 table keeps a store of its own, the float32
    ones share one, and each trains bit for bit as a table of its own."""
    mixed = [dataclasses.replace(c, dtype="float16") if i == 1 else c for i, c in enumerate(configs(3))]
    made = [EmbeddingCollection(mixed, batched=b) for b in (True, False)]
    assert len(made[0].stores) == 2 and [type(t) is BatchedTable for t in made[0].tables] == [True, False, True]
    assert made[0].tables[1].format.dtype == np.float16
    batches = [rng.integers(0, 30, (B, 3)) for _ in range(3)]
    for x, y in zip(*(train(c, batches) for c in made)):
        np.testing.assert_array_equal(x, y)
    assert_same_tables(*made)
