"""The Plan object: row-wise ownership by hash, column ranges, JSON round trips, and what it refuses."""
import json

import numpy as np
import pytest

from gpuemb.sharding.plan import OWNER_SLOT, Placement, Plan, Shard, owner_hash
from gpuemb.sharding.planner import plan_tables
from gpuemb.sharding.spec import RankBudget, TableSpec

GB = 10 ** 9


def _finaliser(z):
    """splitmix64's finaliser of uint64 ``z``: the key index's probe hash."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _mix(keys, slot):
    """io.hashing's mix, in NumPy: splitmix64 (the finaliser of x + golden) of key ^ splitmix64(slot + 1), 63 bits."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        salt = _finaliser(np.uint64(slot + 1) + golden)
        return (_finaliser((keys.view(np.uint64) ^ salt) + golden) & np.uint64((1 << 63) - 1)).view(np.int64)


def _row_plan(W, rows=10 ** 6):
    spec = TableSpec("t", rows, 16, sharding="row")
    shards = tuple(Shard(r, rows // W, (0, 16), residue=(r + 1) % W) for r in range(W))  # residues need not be ranks
    return Plan((RankBudget(GB),) * W, (Placement(spec, "row", shards),), 4096, "fp32")


@pytest.mark.parametrize("W", [2, 3, 8])
def test_row_wise_owners_are_balanced_and_follow_the_hash(W, rng):
    keys = rng.integers(-(1 << 63), (1 << 63) - 1, 10 ** 6, dtype=np.int64)
    plan = _row_plan(W)
    owners = plan.owner_of("t", keys)
    counts = np.bincount(owners, minlength=W)
    assert np.abs(counts / (keys.size / W) - 1).max() < 0.02
    expected = _mix(keys, OWNER_SLOT) % W  # residue i lives on rank (i - 1) mod W in _row_plan
    np.testing.assert_array_equal(owners, (expected - 1) % W)
    np.testing.assert_array_equal(Plan.from_json(plan.to_json()).owner_of("t", keys), owners)


def test_sequential_keys_are_balanced_too():
    owners = _row_plan(8).owner_of("t", np.arange(10 ** 6))
    assert np.abs(np.bincount(owners) / 125_000 - 1).max() < 0.02


def test_owner_hash_is_unrelated_to_the_key_index_hash(rng):
    # The key index homes a key by splitmix64's finaliser (its top bits, by fastrange); one rank's keys must still
    # spread over the whole index, whichever end of the hash it reads.
    keys = rng.integers(0, 1 << 62, 400_000, dtype=np.int64)
    h = _finaliser(keys[owner_hash(keys) % 8 == 3].view(np.uint64))
    for bits in (h >> np.uint64(61), h & np.uint64(7)):
        counts = np.bincount(bits.astype(np.int64), minlength=8)
        assert np.abs(counts / (h.size / 8) - 1).max() < 0.05


@pytest.mark.parametrize("dim,W", [(512, 4), (1000, 3), (700, 8), (9, 8), (1024, 2)])
def test_column_ranges_tile_the_dim(dim, W):
    plan = plan_tables([TableSpec("wide", 1000, dim, sharding="column")], [RankBudget(GB)] * W, batch_size=1024)
    ranges = plan.column_ranges("wide")
    assert ranges[0][1] == 0 and ranges[-1][2] == dim
    assert all(a[2] == b[1] for a, b in zip(ranges, ranges[1:]))
    widths = [stop - start for _, start, stop in ranges]
    assert max(widths) - min(widths) <= 1 and len({r for r, _, _ in ranges}) == len(ranges)
    keys = np.arange(5)
    np.testing.assert_array_equal(plan.owner_of("wide", keys), np.tile([r for r, _, _ in ranges], (5, 1)))


def _mixed_plan():
    """Every kind and every home: huge goes to rank 0's host, big to rank 1's ssd, wide column-wise."""
    tables = [TableSpec("big", 6_000_000, 64), TableSpec("huge", 10_000_000, 64),
              TableSpec("mid", 400_000, 32, pooling="mean"), TableSpec("wide", 2_000, 600, lookups_per_sample=3.0),
              TableSpec("tiny", 40, 8), TableSpec("rw", 50_000, 16, pooling=None, sharding="row", dtype="float16")]
    budgets = [RankBudget(int(0.9 * GB), 4 * GB), RankBudget(int(0.2 * GB), GB, 8 * GB), RankBudget(GB, GB)]
    return plan_tables(tables, budgets, batch_size=3000, codec="int8")


def test_json_round_trip_keeps_every_decision():
    plan = _mixed_plan()
    assert {p.kind for p in plan.placements} == {"table", "row", "column", "data"}
    assert {s.home for p in plan.placements for s in p.shards} >= {"device", "host", "ssd"}
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    d = json.loads(text)
    assert len(d["ranks"]) == 3 and d["placements"][0]["shards"][0]["cols"] == [0, 64]


def test_plan_refuses_what_no_planner_writes():
    spec = TableSpec("t", 100, 8)
    budgets = (RankBudget(GB),) * 2
    with pytest.raises(ValueError, match=r"column ranges \[\(0, 4\), \(5, 8\)\] must tile \[0, 8\)"):
        Plan(budgets, (Placement(spec, "column", (Shard(0, 100, (0, 4)), Shard(1, 100, (5, 8)))),), 64, "fp32")
    with pytest.raises(ValueError, match="row-wise residues must be 0..1"):
        Plan(budgets, (Placement(spec, "row", (Shard(0, 50, (0, 8), residue=0), Shard(1, 50, (0, 8)))),), 64,
             "fp32")
    with pytest.raises(ValueError, match="needs a rank in \\[0, 2\\)"):
        Plan(budgets, (Placement(spec, "table", (Shard(2, 100, (0, 8)),)),), 64, "fp32")
    with pytest.raises(ValueError, match="codec: 'fp8'"):
        Plan(budgets, (), 64, "fp8")
    with pytest.raises(ValueError, match="not a plan"):
        Plan.from_json('{"placements": []}')
    data = Plan(budgets, (Placement(spec, "data", (Shard(0, 100, (0, 8)), Shard(1, 100, (0, 8)))),), 64, "fp32")
    with pytest.raises(ValueError, match="data-parallel"):
        data.owner_of("t", np.arange(3))
    with pytest.raises(KeyError, match="no table 'u'"):
        data.owner_of("u", np.arange(3))
