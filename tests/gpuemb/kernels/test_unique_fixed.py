"""The device's fixed-size unique against ``np.unique``: the distinct keys first, then copies of the largest, the
count on the device, and the same inverse; and its padding ignored by the store that takes it."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.unique import unique_keys_fixed
from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store.level import PinsOnly
from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable


def _cases(rng):
    yield np.array([7], np.int64)
    yield np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max, -1, np.iinfo(np.int64).min])
    yield rng.integers(-(1 << 62), 1 << 62, 3000)  # nearly all distinct
    yield rng.integers(-50, 50, 4000) * 7919  # many repeats, negative keys too
    yield np.full(300, 5, np.int64)  # one key: all padding but the first
    yield rng.integers(0, 3, (64, 9))  # a matrix: flattened


def test_fixed_unique_equals_np_unique_with_its_count(rng, xp):
    for keys in _cases(rng):
        want_u, want_i = np.unique(keys, return_inverse=True)
        flat = keys.ravel()
        unique, inverse, count, valid, source = (to_host(a) for a in unique_keys_fixed(xp.asarray(keys)))
        n, u = flat.size, want_u.size
        assert unique.shape == inverse.shape == valid.shape == source.shape == (n,) and count.shape == (1,)
        assert int(count[0]) == u
        np.testing.assert_array_equal(unique[:u], want_u)
        np.testing.assert_array_equal(unique[u:], np.full(n - u, want_u[-1]))  # padding: the largest key
        np.testing.assert_array_equal(inverse, want_i.ravel())
        np.testing.assert_array_equal(valid, np.arange(n) < u)
        np.testing.assert_array_equal(flat[source], unique)  # an occurrence of each entry, padding too


def test_empty_batch_has_count_zero(xp):
    unique, inverse, count, valid, source = unique_keys_fixed(xp.zeros(0, np.int64))
    assert unique.shape == (0,) and int(to_host(count)[0]) == 0 and valid.shape == (0,)


@pytest.mark.gpu
def test_padding_inserts_pins_and_updates_nothing(rng):
    """An unbounded device table, the one whose step takes the fixed-size unique, with an evict rule so that its
    level keeps each slot's pins: a batch with many repeats pins and inserts only its distinct keys, counts them
    exactly, and its update changes each row once (its step count 1), the largest key's too, whose copies pad the
    unique keys; other keys' rows are untouched."""
    lr, dim = 0.1, 4
    config = TableConfig("t", dim, rule=RowwiseAdagradRule(initial_accumulator_value=0.1), lr=lr,
                         initializer=Initializer("normal", 0.5, seed=3), evict=EvictionRule(min_count=1000))
    table = EmbeddingTable(config)
    level = table.top
    assert level.bound is None and isinstance(level.policy, PinsOnly)
    bystanders = np.arange(1000, 1040, dtype=np.int64)
    table.lookup(backend.to_device(bystanders)).sum().backward()
    before = {int(k): r for k, r in zip(*_rows(table, bystanders))}
    keys = rng.integers(0, 60, 400) * 11
    distinct = np.unique(keys)
    hits, misses = level.hits, level.misses

    def pinned():  # the pins of every slot but the dump row, where the padding's land
        return int(to_host(level.policy.pins[:-1]).sum())
    out = table.lookup(backend.to_device(keys))
    assert len(table) == bystanders.size + distinct.size
    assert pinned() == distinct.size and level.misses - misses == distinct.size and level.hits == hits
    gy = rng.standard_normal((keys.size, dim)).astype(np.float32)
    (out * Tensor(backend.to_device(gy))).sum().backward()
    assert pinned() == 0 and table.in_flight.pinned == 0
    got_keys, got_rows, got_steps = _rows(table, distinct, steps=True)
    np.testing.assert_array_equal(got_steps, np.ones(distinct.size))  # the largest key updated once, not again
    after = {int(k): r for k, r in zip(*_rows(table, bystanders))}
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # Every key known: hits only, exactly counted; the padding's copies of the largest key now find its slot, and
    # must still leave its row to its own update.
    table.lookup(backend.to_device(keys)).sum().backward()
    assert level.hits - hits == distinct.size and level.misses - misses == distinct.size
    assert len(table) == bystanders.size + distinct.size
    _, rows_2, steps_2 = _rows(table, distinct, steps=True)
    np.testing.assert_array_equal(steps_2, np.full(distinct.size, 2))
    assert all(not np.array_equal(a[:dim], b[:dim]) for a, b in zip(got_rows, rows_2))  # each row moved again


@pytest.mark.gpu
def test_a_bounded_table_takes_the_exact_unique_to_weigh_room_by_distinct_keys(rng):
    """A cache or max_rows weighs a prefetch by the distinct keys: 400 keys of 60 distinct fit a room of 100."""
    config = TableConfig("t", 4, options=StoreOptions(max_rows=512))
    table = EmbeddingTable(config)
    keys = backend.to_device(rng.integers(0, 60, 400) * 11)
    unique, inverse, valid, _ = table._unique(keys, None)
    assert valid is None and unique.shape[0] == np.unique(to_host(keys)).size
    assert table.prefetch(keys, room=100) is True


def _rows(table, keys, steps=False):
    """``(keys, rows)`` NumPy of the present ``keys`` (and their steps), as the table exports them."""
    k, rows, s = (np.concatenate(p) for p in zip(*table.export(keys)))
    order = np.argsort(k)
    return (k[order], rows[order], s[order]) if steps else (k[order], rows[order])
