"""A batch's rows are one handle with explicit states (store/batch.py), and the table's state has one owner per
concern: ``in_flight`` for the pins of batches, ``life`` for the keys' clock, ticks, admission and drops."""
import re
from pathlib import Path

import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGDRule
from gpuemb.store import EmbeddingTable, LeaseError, StoreOptions, TableConfig
from gpuemb.store.batch import BatchRows
from gpuemb.store.init import initial_weights

D, LR = 4, 0.5
ROOT = Path(__file__).resolve().parents[3] / "gpuemb"


def _table(placement, **config):
    options = StoreOptions(max_rows=64) if placement == "device" else StoreOptions("host", cache_rows=64)
    return EmbeddingTable(TableConfig("t", D, rule=SGDRule(), lr=LR, options=options, **config))


def _want(table, keys, grads):
    """NumPy: each distinct key's initial row less LR times the sum of its occurrences' gradients."""
    distinct = np.unique(keys)
    summed = np.stack([grads[keys == k].sum(0) for k in distinct])
    return distinct, initial_weights(table.config.initializer, distinct, D) - LR * summed


def _rows(table, keys):
    got = {int(k): r[:D] for chunk in table.export(keys) for k, r in zip(chunk[0], chunk[1])}
    return np.stack([got[int(k)] for k in keys])


@pytest.mark.parametrize("placement", ["device", "host"])
def test_a_prefetched_batch_is_looked_up_then_updated(placement, rng):
    table = _table(placement)
    keys = rng.integers(0, 40, 24)
    assert table.prefetch(keys)
    batch = table.in_flight.prefetched[0]
    assert batch.state == "prefetched" and table.in_flight.pinned == np.unique(keys).size
    out = table.lookup(keys)
    assert out.creator.batch is batch and batch.state == "looked up" and not table.in_flight.prefetched
    grads = rng.standard_normal((keys.size, D)).astype(np.float32)
    out.backward(grads)
    assert batch.state == "updated" and table.in_flight.pinned == 0
    distinct, want = _want(table, keys, grads)
    np.testing.assert_allclose(_rows(table, distinct), want, rtol=1e-6, atol=1e-7)


def test_a_prefetch_of_other_keys_is_released_once_the_lookup_has_its_rows(rng):
    table = _table("device")
    stale_keys, keys = rng.integers(0, 20, 8), rng.integers(100, 120, 8)
    table.prefetch(stale_keys)
    stale = table.in_flight.prefetched[0]
    out = table.lookup(keys)
    assert stale.state == "released" and out.creator.batch.state == "looked up"
    assert table.in_flight.pinned == np.unique(keys).size


@pytest.mark.parametrize("apply", [False, True])
def test_held_batches_update_only_when_released_to_apply(apply, rng):
    table = _table("device")
    keys = rng.integers(0, 30, 16)
    held = table.hold_updates()
    out = table.lookup(keys)
    grads = rng.standard_normal((keys.size, D)).astype(np.float32)
    out.backward(grads)
    batch = out.creator.batch
    assert held == [batch] and batch.state == "held" and table.in_flight.pinned == np.unique(keys).size
    distinct, want = _want(table, keys, grads)
    initial = initial_weights(table.config.initializer, distinct, D)
    np.testing.assert_array_equal(_rows(table, distinct), initial)  # nothing applied while held
    table.release_updates(apply)
    assert batch.state == ("updated" if apply else "released") and table.in_flight.pinned == 0
    assert table.in_flight.held is None
    np.testing.assert_allclose(_rows(table, distinct), want if apply else initial, rtol=1e-6, atol=1e-7)


def test_no_move_leaves_a_final_state():
    batch = BatchRows("t", None, np.zeros(1), None, None, None, "updated")
    with pytest.raises(LeaseError, match=r"^t: backward through a lookup whose rows were already updated; ") as e:
        batch.move("held")
    assert "\n" not in str(e.value)
    with pytest.raises(LeaseError, match=r"^t: a batch's rows cannot go from updated to looked up$"):
        batch.move("looked up")
    batch = BatchRows("t", None, np.zeros(1), None, None, None, "prefetched")
    with pytest.raises(LeaseError, match="from prefetched to updated"):
        batch.move("updated")  # a prefetch is looked up before its update


def test_the_clock_and_ticks_follow_updates_imports_and_drops(rng):
    table = _table("device", track_updates=True)
    life, home = table.life, table.home
    for step in range(1, 4):
        keys = np.arange(step * 10, step * 10 + 5)
        table.lookup(keys).backward(rng.standard_normal((5, D)).astype(np.float32))
        assert life.clock == step and table.marker() == step
    ticks = dict(home.ticks().tolist())
    assert all(ticks[k] == k // 10 for k in range(10, 35) if k % 10 < 5)
    table.import_rows([7], np.ones((1, home.tier.width), np.float32), [0])
    assert dict(home.ticks([7]).tolist())[7] == life.clock + 1  # changed at the next tick
    assert table.delete([10, 11]) == 2 and life.dropped
    assert [(tick, list(k)) for tick, k in life.deleted] == [(life.clock + 1, [10, 11])]
    table.clear_dirty()
    assert not life.dropped


def _writers(pattern, allowed):
    """The files under gpuemb/ but ``allowed`` whose code matches ``pattern``."""
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                  if str(p.relative_to(ROOT)) not in allowed and re.search(pattern, p.read_text()))


def test_each_concern_has_one_writer():
    """The keys' lifecycle is written in keylife.py alone, the pins of batches in batch.py (over the level's own
    per-slot pins, level.py): no other file pins, unpins, ticks or logs drops."""
    life = r"\.clock\s*[-+]?=[^=]|touched\[[^]]*\]\s*=[^=]|\.(deleted|trimmed|dropped)\s*(=[^=]|\.append|\[)"
    assert _writers(life, {"store/keylife.py", "comm/modelled.py"}) == []  # the modelled link's is a wall clock
    assert _writers(r"\.top\.(acquire|unpin)\(|\.policy\.(pin|unpin)\(", {"store/level.py", "store/batch.py"}) == []
