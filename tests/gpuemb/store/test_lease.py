"""A lookup whose backward never comes gives its pinned rows back: explicitly (``release``) or when its output is
garbage; a released lookup cannot update, and one that updated is not released twice."""
import gc
import threading

import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGDRule
from gpuemb.store import EmbeddingCollection, EmbeddingTable, LeaseError, StoreOptions, TableConfig, release
from gpuemb.store.init import initial_weights

D = 4


def _options(placement, tmp_path):
    if placement == "device":
        return StoreOptions(max_rows=8)
    if placement == "host":
        return StoreOptions("host", cache_rows=8)
    return StoreOptions("ssd", cache_rows=8, ssd_path=str(tmp_path / "t.h5"), slab_rows=64, chunk_rows=4)


def _table(placement, tmp_path, name="t"):
    return EmbeddingTable(TableConfig(name, D, rule=SGDRule(), lr=0.5, options=_options(placement, tmp_path)))


@pytest.mark.parametrize("placement", ["device", "host", "ssd"])
def test_abandoned_lookups_do_not_fill_a_bounded_level(placement, tmp_path, xp):
    """The JAX client's failure: a level of 8 rows, lookups of 4 fresh keys each, no backward; the third used to
    raise StoreFullError. Now each dropped output gives its pins back, and training afterwards is unchanged. (``xp``
    runs it on the device too, in the emulation pass; the gradient stays a host array, as another stack's may.)"""
    table, rng = _table(placement, tmp_path), np.random.default_rng(1)
    for i in range(30):
        rows = table.lookup(rng.integers(0, 1 << 40, 4))  # the previous output is dropped here
    del rows
    keys = rng.integers(0, 1 << 40, 4)
    out = table.lookup(keys)
    np.testing.assert_array_equal(to_host(out.data), initial_weights(table.config.initializer, keys, D))
    g = rng.standard_normal((4, D)).astype(np.float32)
    out.backward(g)
    got = next(table.export(keys))
    want = initial_weights(table.config.initializer, got[0], D) - 0.5 * g[_order(keys, got[0])]
    np.testing.assert_allclose(got[1][:, :D], want, rtol=1e-6)
    assert table.in_flight.pinned == 0
    table.close()


def _order(keys, exported):
    """Where each exported key was in the lookup's ``keys``."""
    return np.array([np.flatnonzero(keys == k)[0] for k in exported])


def test_release_unpins_at_once_and_the_backward_then_refuses(tmp_path, xp):
    table, rng = _table("device", tmp_path), np.random.default_rng(2)
    keys = rng.integers(0, 1 << 40, 6)
    out = table.lookup(keys)
    assert table.in_flight.pinned == 6
    assert release(out) == 1
    assert table.in_flight.pinned == 0
    assert release(out) == 0  # once only
    with pytest.raises(LeaseError, match="already released"):
        out.backward(rng.standard_normal((6, D)).astype(np.float32))
    assert len(table) == 6 and (table.dirty_keys().size == 0)  # no row was updated


def test_a_lookup_that_updated_is_not_released(tmp_path):
    table, rng = _table("device", tmp_path), np.random.default_rng(3)
    out = table.lookup(rng.integers(0, 1 << 40, 5))
    out.backward(rng.standard_normal((5, D)).astype(np.float32))
    assert table.in_flight.pinned == 0
    assert release(out) == 0
    del out
    gc.collect()
    assert table.in_flight.pinned == 0 and not table.in_flight.released  # the collector does not unpin a second time
    with pytest.raises(LeaseError, match="already updated"):
        out = table.lookup(np.arange(3))
        out.backward(np.ones((3, D), np.float32))
        out.backward(np.ones((3, D), np.float32))


def test_release_reaches_every_lookup_behind_a_collections_output(tmp_path, xp):
    configs = [TableConfig(f"f{i}", D, options=StoreOptions(max_rows=16)) for i in range(3)]
    coll, rng = EmbeddingCollection(configs), np.random.default_rng(4)
    out = coll(rng.integers(0, 1 << 30, (5, 3)))
    assert [t.in_flight.pinned for t in coll.tables] == [5, 5, 5]
    assert release(out) == 3
    assert [t.in_flight.pinned for t in coll.tables] == [0, 0, 0]


def test_an_output_dropped_on_another_thread_is_unpinned_at_the_next_lock(tmp_path):
    """The collector may run anywhere, even where the table's lock is held: a dropped lookup only queues its
    slots, and the next call that takes the lock unpins them."""
    table, rng = _table("device", tmp_path), np.random.default_rng(5)
    box = [table.lookup(rng.integers(0, 1 << 40, 4))]
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert len(table.in_flight.released) == 1 and table.in_flight.pinned == 4
    assert table.room() == 8  # room() takes the lock, so it unpins first
    assert table.in_flight.pinned == 0
