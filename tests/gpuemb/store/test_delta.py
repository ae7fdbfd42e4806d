"""Deltas (``EmbeddingTable.marker``/``delta``, ``save_delta``/``apply_delta``): a base snapshot and the deltas
after it, applied in order, give the live table bit for bit, through training, evictions and deletes."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, no_grad
from gpuemb.autograd.backend import to_device
from gpuemb.optim import AdagradRule
from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig
from gpuemb.store.snapshot import SnapshotError, apply_delta, load_snapshot, save_delta, save_snapshot
from gpuemb.store.table import EmbeddingTable

D = 4


def config(placement, tmp_path, **more):
    options = StoreOptions(slab_rows=64) if placement == "device" else StoreOptions("host", cache_rows=64,
                                                                                       slab_rows=64)
    return TableConfig("t", D, initializer=Initializer("normal", 0.5, seed=9), rule=AdagradRule(), lr=0.1,
                       options=options, **more)


def state(t):
    got = [np.concatenate(a) for a in zip(*t.export())]
    order = np.argsort(got[0])
    return [a[order] for a in got]


def train(t, rng, n, start=0):
    """``n`` batches of 24 keys among the 400 from ``start`` on."""
    for _ in range(n):
        keys = (start + rng.integers(0, 400, 24)) * 13
        y = t.lookup(keys)
        (y * Tensor(to_device(rng.standard_normal(y.shape).astype(np.float32)))).sum().backward()


@pytest.mark.parametrize("placement", ["device", "host"])
def test_a_base_and_its_deltas_give_the_live_table(placement, tmp_path, rng):
    live = EmbeddingTable(config(placement, tmp_path, track_updates=True, admit_after=2,
                                 evict=EvictionRule(ttl_steps=15), evict_every=10))
    train(live, rng, 20)
    since = live.marker()
    save_snapshot(live, tmp_path / "base.h5")
    dirty = live.dirty_keys().copy()
    deltas, dropped, logged = [], 0, 0
    for i in range(4):
        train(live, rng, 12)
        held = np.concatenate(list(live.keys()))
        dropped += live.delete(rng.choice(held, 15, replace=False))
        with no_grad():  # inserted, never updated: in the delta all the same
            live.lookup(rng.integers(0, 400, 24) * 13)
        deltas.append(tmp_path / f"d{i}.h5")
        logged += len(live.life.deleted)
        since = save_delta(live, deltas[-1], since)
    assert dropped == 60 and logged > 4  # the deletes, and evictions every 10 batches
    assert np.isin(dirty, live.dirty_keys()).all()  # the deltas left the incremental's keys alone
    copy = EmbeddingTable(config(placement, tmp_path))
    load_snapshot(copy, [tmp_path / "base.h5"])
    with pytest.raises(SnapshotError, match="apply the deltas in the order they were saved"):
        apply_delta(copy, deltas[1])  # the first one skipped
    for path in deltas:
        apply_delta(copy, path)
    with pytest.raises(SnapshotError, match="is at marker"):
        apply_delta(copy, deltas[-1])  # the last one again
    want, got = state(live), state(copy)
    assert want[0].size > 100
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(SnapshotError, match="is a delta"):
        load_snapshot(EmbeddingTable(config(placement, tmp_path)), [deltas[0]])


def test_a_table_without_ticks_says_how_to_get_them(tmp_path, xp):
    t = EmbeddingTable(config("device", tmp_path))
    with pytest.raises(ValueError, match=r"TableConfig\(track_updates=True\)"):
        t.delta(t.marker())


def test_a_delta_forgets_the_drops_it_has_passed(tmp_path, rng, xp):
    """``delta(since)`` keeps only the drops after ``since``; one since an older marker says to take a new base."""
    t = EmbeddingTable(config("device", tmp_path, evict=EvictionRule(ttl_steps=2), evict_every=2))
    train(t, rng, 6)
    first = t.marker()
    train(t, rng, 4)
    second = t.marker()
    train(t, rng, 4)
    ticks = [tick for tick, _ in t.life.deleted]
    assert min(ticks) <= first < second < max(ticks)
    deleted = t.delta(second)[3]
    assert [tick for tick, _ in t.life.deleted] == [tick for tick in ticks if tick > second] and deleted.size > 0
    with pytest.raises(ValueError, match=f"deltas before marker {second} were trimmed.*take a new base snapshot"):
        t.delta(first)
    np.testing.assert_array_equal(t.delta(second)[3], deleted)  # the same marker again: still answerable


def test_regular_deltas_keep_the_drop_log_small(tmp_path, rng):
    """400 batches evicting every 4, a delta every 20: the log keeps the drops since the marker of the delta before,
    two deltas' evictions (10) and the one at that marker, while over 1,000 keys were dropped in all."""
    t = EmbeddingTable(config("device", tmp_path, evict=EvictionRule(ttl_steps=6), evict_every=4))
    since, most, drops = t.marker(), 0, 0
    for i in range(20):
        train(t, rng, 20, start=40 * i)
        most = max(most, len(t.life.deleted))
        drops += t.delta(since)[3].size
        since = t.marker()
    assert most <= 11 and drops > 1000 and len(t.life.deleted) <= 6
