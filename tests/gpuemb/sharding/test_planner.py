"""The greedy planner: a small example worked by hand, each placement rule, tiers, budgets kept, and PlanError."""
import math

import pytest

from gpuemb.sharding.cost import rank_costs, shard_memory
from gpuemb.sharding.planner import COLUMN_WIDTH, PlanError, plan_tables
from gpuemb.sharding.presets import CRITEO_1TB_ROWS, preset_tables
from gpuemb.sharding.report import imbalance
from gpuemb.sharding.spec import RankBudget, TableSpec

GB = 10 ** 9


def _tables(rows, dim=8, **kw):
    return [TableSpec(f"t{i}", r, dim, rule="SGDRule", **kw) for i, r in enumerate(rows)]


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 1, 0, 2]])
def test_greedy_by_hand(order):
    # 2 ranks, B=20000 (10000 a rank), one key a sample, fp32 rows of 8 (32 B). A table-wise table of R rows costs
    # its owner R·96 lookup bytes (R < B: every row touched) + 10000 rows of 32 B sent back = R·96 + 320000, and
    # the other rank 10000 keys of 8 B + 10000 gradients of 32 B = 400000. Largest first, onto the least loaded:
    #   a (4000): rank 0 (tie)  -> loads  704000,  400000
    #   b (3000): rank 1        -> loads 1104000, 1008000
    #   c (2000): rank 1        -> loads 1504000, 1520000
    #   d (1500): rank 0        -> loads 1968000, 1920000
    tables = _tables([4000, 3000, 2000, 1500])
    plan = plan_tables([tables[i] for i in order], [RankBudget(GB)] * 2, batch_size=20000, dp_max_bytes=0)
    assert [plan.placement(f"t{i}").shards[0].rank for i in range(4)] == [0, 1, 1, 0]
    assert all(p.kind == "table" for p in plan.placements)
    loads = [c.load for c in rank_costs(plan)]
    assert loads == [1_968_000, 1_920_000]
    assert imbalance(loads) == pytest.approx(1_968_000 / 1_944_000)


def test_row_wise_when_no_device_holds_the_table():
    spec = TableSpec("big", 5_000_000, 64)  # 65 float32, 24 B index, 26 B bookkeeping: 1.55 GB
    plan = plan_tables([spec], [RankBudget(GB)] * 4)
    p = plan.placement("big")
    assert p.kind == "row" and [s.rows for s in p.shards] == [1_250_000] * 4
    assert all(s.home == "device" for s in p.shards) and "no rank has room for all 1.55 GB" in p.reason
    assert sorted(s.residue for s in p.shards) == [0, 1, 2, 3]


def test_table_wise_when_one_device_holds_it():
    plan = plan_tables([TableSpec("big", 5_000_000, 64)], [RankBudget(2 * GB)] * 4)
    assert plan.placement("big").kind == "table" and plan.placement("big").shards[0].home == "device"


@pytest.mark.parametrize("host,ssd,home", [(4 * GB, 0, "host"), (GB // 5, 10 * GB, "ssd")])
def test_a_device_cache_over_host_or_ssd(host, ssd, home):
    spec = TableSpec("big", 5_000_000, 64)
    plan = plan_tables([spec], [RankBudget(GB // 2, host, ssd)], batch_size=4096)
    shard = plan.placement("big").shards[0]
    assert shard.home == home and shard.cache_rows == 1_250_000  # a quarter of the rows: it fits 0.5 GB
    assert f"homed in {home} under a device cache" in plan.placement("big").reason
    small = plan_tables([spec], [RankBudget(GB // 10, host, ssd)], batch_size=4096).placement("big").shards[0]
    per_row = shard_memory(spec, 1).device
    assert 2 * 4096 <= small.cache_rows == (GB // 10) // per_row  # shrunk to the device, above two batches


def test_column_wise_for_a_wide_table_with_few_rows():
    plan = plan_tables([TableSpec("wide", 10_000, 512)], [RankBudget(GB)] * 8)
    p = plan.placement("wide")
    assert p.kind == "column" and len(p.shards) == 512 // COLUMN_WIDTH
    assert [c for _, *c in plan.column_ranges("wide")] == [[0, 128], [128, 256], [256, 384], [384, 512]]
    narrow = plan_tables([TableSpec("n", 10_000, 64)], [RankBudget(GB)] * 8).placement("n")
    assert narrow.kind == "table"


def test_small_tables_are_data_parallel(rng):
    rows = [int(r) for r in rng.integers(2, 500, 3)]
    plan = plan_tables(_tables(rows + [100_000]), [RankBudget(GB)] * 3)
    assert [p.kind for p in plan.placements] == ["data"] * 3 + ["table"]
    assert all(c.allreduce > 0 for c in rank_costs(plan))
    off = plan_tables(_tables(rows), [RankBudget(GB)] * 3, dp_max_bytes=0)
    assert {p.kind for p in off.placements} == {"table"}


def test_plan_error_names_the_table_and_what_to_change():
    tables = preset_tables("criteo-1tb")
    with pytest.raises(PlanError) as e:
        plan_tables(tables, [RankBudget(10 * GB)] * 8)
    msg = str(e.value)
    assert msg.startswith("cannot place table 'C10' (29275261 rows x dim 128, RowwiseAdagradRule, float32: 16.57 GB")
    assert "80.00 GB device, 0 B host and 0 B ssd in all" in msg
    for remedy in ("more ranks (all 26 tables need about 100.72 GB on device: 11 or more ranks",
                   "a larger budget (row-wise this table needs 2.07 GB of device per rank",
                   "a host or ssd tier", "a smaller dim (dim 64: ", "fp16 rows (dtype='float16': "):
        assert remedy in msg
    assert "\n" not in msg
    with pytest.raises(PlanError, match="sharding='auto' instead of 'data'"):
        plan_tables([TableSpec("t", 10 ** 7, 64, sharding="data")], [RankBudget(GB)] * 2)


def test_budgets_are_never_exceeded(rng):
    placed = failed = 0
    for _ in range(25):
        W = int(rng.integers(1, 6))
        tables = [TableSpec(f"t{i}", int(10 ** rng.uniform(1, 7)), int(rng.choice([8, 64, 600])),
                            lookups_per_sample=float(rng.uniform(0.5, 4)))
                  for i in range(int(rng.integers(1, 8)))]
        budgets = [RankBudget(int(10 ** rng.uniform(8, 9.5)), int(rng.choice([0, 2 * GB])),
                              int(rng.choice([0, 20 * GB]))) for _ in range(W)]
        try:
            plan = plan_tables(tables, budgets, batch_size=8192)
        except PlanError:
            failed += 1
            continue
        placed += 1
        for c, b in zip(rank_costs(plan), budgets):
            assert c.memory.device <= b.device_bytes and c.memory.host <= b.host_bytes
            assert c.memory.ssd <= b.ssd_bytes
        for p in plan.placements:  # every key of every table has a home
            rows = p.table.rows * (1 if p.kind in ("table", "row") else len(p.shards))
            assert sum(s.rows for s in p.shards) == rows
    assert placed and failed  # both kinds of case were drawn


def test_criteo_1tb_on_8_ranks_of_80gb():
    plan = plan_tables(preset_tables("criteo-1tb"), [RankBudget(80 * GB)] * 8, codec="int8")
    kinds = {p.table.rows: p.kind for p in plan.placements}
    assert all(kinds[r] == ("data" if r <= 1441 else "table") for r in CRITEO_1TB_ROWS)
    eight = sorted(plan.placements, key=lambda p: -p.table.rows)[:8]
    assert sorted(p.shards[0].rank for p in eight) == list(range(8))  # the largest, one per rank
    assert imbalance(c.load for c in rank_costs(plan)) < 1.25


def test_caches_leave_room_for_the_tables_still_to_come():
    # Small devices over host: if the first caches took every byte left, the small tables would pile onto one rank.
    plan = plan_tables(preset_tables("criteo-kaggle"), [RankBudget(2 * GB, 20 * GB)] * 4)
    costs = rank_costs(plan)
    assert any(s.home == "host" for p in plan.placements for s in p.shards)
    assert imbalance(c.load for c in costs) < 1.1
    assert all(c.memory.device <= 2 * GB for c in costs)
    grown = [s for p in plan.placements for s in p.shards if s.home == "host"]
    assert all(s.cache_rows <= math.ceil(0.25 * s.rows) for s in grown)


@pytest.mark.parametrize("kwargs,message", [
    (dict(tables=[]), "tables must be a non-empty list of TableSpec"),
    (dict(tables=_tables([10, 20]) + _tables([30])), "table names repeat (['t0'])"),
    (dict(budgets=[]), "budgets must be a non-empty list of RankBudget"),
    (dict(batch_size=2), "batch_size=2; use an int >= the 3 ranks"),
    (dict(codec="fp8"), "codec='fp8'; use one of fp32, fp16, bf16, int8"),
    (dict(cache_fraction=0), "cache_fraction=0; use a number in (0, 1]"),
])
def test_bad_planner_input(kwargs, message):
    args = dict(tables=_tables([10, 20]), budgets=[RankBudget(GB)] * 3) | kwargs
    with pytest.raises(ValueError) as e:
        plan_tables(**args)
    assert message in str(e.value) and not isinstance(e.value, PlanError)
