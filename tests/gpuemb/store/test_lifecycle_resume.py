"""A snapshot keeps a table's lifecycle (its update clock, each key's last update tick, the pending counts), so a
restored table continued on the same batches equals the table never stopped, evictions and admissions and all;
and the ticks reshard with the keys."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_device
from gpuemb.distributed import load_sharded
from gpuemb.optim import AdagradRule
from gpuemb.sharding.plan import owner_hash
from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig
from gpuemb.store.snapshot import TableSnapshot, load_snapshot, save_snapshot, write_snapshot
from gpuemb.store.table import EmbeddingTable

D = 4
OPTIONS = {"device": lambda tmp: StoreOptions(slab_rows=64),
           "host": lambda tmp: StoreOptions("host", cache_rows=48, slab_rows=64)}


def table(tmp_path, placement="device", **more):
    life = dict(admit_after=2, evict=EvictionRule(ttl_steps=12), evict_every=5) | more
    return EmbeddingTable(TableConfig("t", D, initializer=Initializer("normal", 0.5, seed=3), rule=AdagradRule(),
                                      lr=0.1, options=OPTIONS[placement](tmp_path), **life))


def drifting(rng, n):
    """``n`` batches ``(keys, grads)`` whose hot range of 200 keys moves by 40 every 10 batches."""
    return [((i // 10) * 40 + rng.integers(0, 200, 24), rng.standard_normal((24, D)).astype(np.float32))
            for i in range(n)]


def train(t, batches):
    for keys, gy in batches:
        (t.lookup(keys) * Tensor(to_device(gy))).sum().backward()


def everything(t):
    """Keys, rows, steps, ticks (key order) and pending counts (key order) of ``t``, and its clock."""
    keys, rows, steps = (np.concatenate(a) for a in zip(*t.export()))
    order = np.argsort(keys)
    pending = np.concatenate([np.stack(kcs, 1) for kcs in t.admission.counts()] + [np.zeros((0, 3), np.int64)])
    ticks = t.home.ticks()
    return {"keys": keys[order], "rows": rows[order], "steps": steps[order], "clock": t.life.clock,
            "ticks": ticks[np.argsort(ticks[:, 0])], "pending": pending[np.argsort(pending[:, 0])]}


@pytest.mark.parametrize("placement", ["device", "host"])
def test_a_restored_table_continues_as_the_unbroken_one(placement, tmp_path, rng):
    batches = drifting(rng, 70)
    live = table(tmp_path, placement)
    train(live, batches[:30])
    save_snapshot(live, tmp_path / "s.h5")
    back = table(tmp_path, placement)
    load_snapshot(back, [tmp_path / "s.h5"])
    dropped_before = sum(k.size for _, k in live.life.deleted)
    train(live, batches[30:])
    train(back, batches[30:])
    want, got = everything(live), everything(back)
    for name in want:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)
    assert sum(k.size for _, k in live.life.deleted) > dropped_before > 0  # evictions on both sides of the save
    assert want["pending"].shape[0] > 10 and want["keys"].size > 100


def test_a_snapshot_without_clock_or_ticks_loads_with_every_key_updated_now(tmp_path, rng):
    """What a snapshot from before the clock was saved holds: rows alone. The clock restarts at 0, and every key
    reads as updated at it, so none is evicted by age until ``ttl_steps`` batches have passed."""
    live = table(tmp_path, admit_after=None)
    train(live, drifting(rng, 20))
    keys, rows, steps = (np.concatenate(a) for a in zip(*live.export()))
    write_snapshot(tmp_path / "old.h5", {"t": TableSnapshot(live.config.to_dict(), live.format.layout, keys, rows,
                                                            steps)})
    back = table(tmp_path, admit_after=None)
    load_snapshot(back, [tmp_path / "old.h5"])
    assert back.life.clock == 0 and live.life.clock == 20
    ticks = back.home.ticks()
    assert sorted(ticks[:, 0].tolist()) == sorted(keys.tolist()) and (ticks[:, 1] == 0).all()


def test_ticks_and_clock_reshard_from_two_ranks_to_three(tmp_path, rng, row_rank):
    """Each of 3 new ranks takes the ticks of the keys its plan gives it; all take the larger of the 2 clocks."""
    want, clocks = {}, []
    for r in range(2):  # the files of a row-wise save of 2 ranks, rank 1 having had more batches
        t = table(tmp_path, admit_after=None, evict=EvictionRule(ttl_steps=1000))
        train(t, [(keys * 2 + r, gy) for keys, gy in drifting(rng, 12 + 5 * r)])  # rank r owned parity r
        want.update(dict(t.home.ticks().tolist()))
        clocks.append(t.life.clock)
        mark = {"id": "save", "rank": r, "world_size": 2, "shards": {"t": {"kind": "row", "cols": [0, D], "dim": D}}}
        save_snapshot(t, tmp_path / f"s{r}.h5", meta={"sharded": mark})
    got = {}
    for rank in range(3):
        new = row_rank(rank, 3, table(tmp_path, admit_after=None, evict=EvictionRule(ttl_steps=1000)))
        load_sharded(new, [tmp_path / "s0.h5", tmp_path / "s1.h5"])
        shard = new.shards["t"].table
        mine = dict(shard.home.ticks().tolist())
        assert all(owner_hash(np.array([k]))[0] % 3 == rank for k in mine)
        assert shard.life.clock == max(clocks)
        got.update(mine)
    assert got == want and len(set(want.values())) > 5 and clocks == [12, 17]
