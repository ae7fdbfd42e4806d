"""The planner over several hosts chooses grid for a wide table where the estimate says its step is faster and its
shards fit, and keeps column-, row- or table-wise elsewhere; a table asked for grid or table_row goes so, or fails in
one line naming the table and what to change."""
import dataclasses

import pytest

from gpuemb.comm.link import PRESETS as LINKS
from gpuemb.sharding.cost import human_bytes, rank_costs, shard_memory
from gpuemb.sharding.estimate import estimate_step
from gpuemb.sharding.hierarchical import grid_placement, host_placement_costs
from gpuemb.sharding.plan import Plan, load_plan
from gpuemb.sharding.planner import PlanError, plan_tables
from gpuemb.sharding.profile import PROFILES
from gpuemb.sharding.spec import RankBudget, TableSpec

GB = 10 ** 9
W, L = 8, 4  # two hosts of four ranks
BUDGETS = [RankBudget(80 * GB)] * W


def wide(lookups=1.0, **kw):
    """A table the planner splits by columns (dim >= 512, few rows): 8 column-wise shards on 8 ranks."""
    return TableSpec("w", 100_000, 1024, lookups_per_sample=lookups, **kw)


def step_s(placement):
    plan = Plan(tuple(BUDGETS), (placement,), 65536, "fp32", L)
    return estimate_step(plan, LINKS["ib100"], PROFILES["h200"], local_link=LINKS["nvlink4"]).step_s


def test_a_wide_one_hot_table_goes_grid_over_two_hosts():
    p = plan_tables([wide()], BUDGETS, local_ranks=L).placement("w")
    column = plan_tables([wide()], BUDGETS).placement("w")  # one host: column-wise, as before
    assert p.kind == "grid" and column.kind == "column" and len(column.shards) == W
    grid_s, column_s = step_s(p), step_s(column)  # 8 shards each: one copy covers the ranks
    assert grid_s < column_s
    assert p.reason.endswith(f"dim 1024 >= 512 with few rows, and a step is estimated {column_s / grid_s:.2f}x faster "
                             f"than column-wise in 8 shards ({grid_s * 1e3:.2f} against {column_s * 1e3:.2f} ms, "
                             "as 1 copy)")
    by_range = Plan(tuple(BUDGETS), (p,), 65536, "fp32", L).owners("w")
    assert [cols for cols, _ in by_range] == [(0, 512), (512, 1024)]
    for h, (cols, ranks) in enumerate(by_range):  # each range row-wise over the ranks of one host
        assert ranks == tuple(range(h * L, (h + 1) * L))
        shards = [s for s in p.shards if s.cols == cols]
        assert sorted(s.residue for s in shards) == list(range(L)) and sum(s.rows for s in shards) == 100_000


def test_pooled_bags_go_grid_where_the_relay_makes_the_step_faster():
    # 20 keys a bag: each row shard of a grid pools a partial row of a bag, but the partials combine within their
    # host (gpuemb/distributed/host_relay.py), so one row a bag crosses between hosts, not one a row shard
    spec = wide(20.0)
    p = plan_tables([spec], BUDGETS, local_ranks=L).placement("w")
    column = plan_tables([spec], BUDGETS).placement("w")
    assert p.kind == "grid" and "estimated" in p.reason
    assert step_s(p) < step_s(column)
    # without hosts to relay within (one rank a host), each row shard's partial crosses: column-wise stays
    assert plan_tables([spec], BUDGETS, local_ranks=1).placement("w").kind == "column"


@pytest.mark.parametrize("local_ranks", [None, W])
def test_one_host_plans_as_before(local_ranks):
    assert plan_tables([wide()], BUDGETS, local_ranks=local_ranks).placement("w").kind == "column"


def test_a_narrow_table_is_not_split_over_the_hosts():
    narrow = TableSpec("n", 100_000, 64)
    plans = [plan_tables([narrow], BUDGETS, local_ranks=lr) for lr in (None, L)]
    assert plans[0].placements == plans[1].placements and plans[0].placement("n").kind == "table"


def test_rows_no_column_shard_holds_go_grid_where_faster_than_row_wise():
    # each rank's device holds a grid shard (half the rows, half the columns) but not a column-wise one (all rows)
    spec = TableSpec("w", 1_000_000, 2048, lookups_per_sample=20.0)
    grid_bytes = shard_memory(spec, spec.rows // 2, spec.dim // 2).device
    assert shard_memory(spec, spec.rows, spec.dim // 4).device > grid_bytes > shard_memory(spec, spec.rows // 4).device
    p = plan_tables([spec], [RankBudget(grid_bytes)] * 4, local_ranks=2).placement("w")
    whole = human_bytes(shard_memory(spec, spec.rows).device)
    assert p.kind == "grid" and f"no rank has room for all {whole} or a column-wise shard of all its rows" in p.reason
    assert "faster than row-wise over all 4 ranks" in p.reason
    one_hot = dataclasses.replace(spec, lookups_per_sample=1.0)  # as many rows cross either way: row-wise stays
    assert plan_tables([one_hot], [RankBudget(grid_bytes)] * 4, local_ranks=2).placement("w").kind == "row"


def test_a_grid_is_committed_with_its_costs_so_the_next_table_goes_to_the_least_loaded_rank():
    # 100001 rows and dim 1025: residue 0 holds a row more, host 0's range a column less, so the ranks differ
    spec = TableSpec("w", 100_001, 1025)
    alone = plan_tables([spec], BUDGETS, local_ranks=L)
    assert alone.placement("w").kind == "grid"
    costs = host_placement_costs(alone.placement("w"), W, 65536, "fp32")
    for r, c in enumerate(costs):
        (s,) = [s for s in alone.placement("w").shards if s.rank == r]
        assert c.memory == shard_memory(spec, s.rows, s.cols[1] - s.cols[0])
    least = min(range(W), key=lambda r: (costs[r].load, costs[r].memory.device, r))
    assert least != 0  # rank 0 would win a tie: the costs tell the ranks apart
    plan = plan_tables([spec, TableSpec("t", 50_000, 64)], BUDGETS, dp_max_bytes=0, local_ranks=L)
    assert plan.placement("w") == alone.placement("w")
    assert plan.placement("t").kind == "table" and plan.placement("t").shards[0].rank == least
    assert rank_costs(plan)[least].memory == costs[least].memory + shard_memory(plan.placement("t").table, 50_000)


def test_a_grid_plan_round_trips_through_its_json(tmp_path):
    plan = plan_tables([wide(), TableSpec("t", 50_000, 64)], BUDGETS, local_ranks=L)
    assert plan.placement("w").kind == "grid"
    assert Plan.from_json(plan.to_json()) == plan
    (tmp_path / "plan.json").write_text(plan.to_json())
    assert load_plan(tmp_path / "plan.json", W, [p.table for p in plan.placements]) == plan
    broken = dataclasses.replace(plan.placement("w"), shards=plan.placement("w").shards[1:])
    with pytest.raises(ValueError, match="row-wise over ranks"):  # the plan's own check of a grid
        Plan(plan.budgets, (broken,), plan.batch_size, plan.codec, L)


@pytest.mark.parametrize("kind", ["grid", "table_row"])
def test_an_asked_for_2d_kind_is_placed_and_committed_with_its_costs(kind):
    # a narrow table the planner alone would put table-wise; the next table goes to the least loaded rank
    asked = TableSpec("a", 100_001, 65, sharding=kind)
    plan = plan_tables([asked, TableSpec("t", 50_000, 64)], BUDGETS, dp_max_bytes=0, local_ranks=L)
    p = plan.placement("a")
    assert p.kind == kind and p.reason.endswith(": as asked")
    if kind == "grid":
        assert p == dataclasses.replace(grid_placement(asked, W, L), reason=p.reason)
    else:  # every host is as loaded: the first, host 0
        assert sorted(s.rank for s in p.shards) == list(range(L)) and sum(s.rows for s in p.shards) == 100_001
    costs = host_placement_costs(p, W, 65536, "fp32")
    least = min(range(W), key=lambda r: (costs[r].load, costs[r].memory.device, r))
    assert plan.placement("t").shards[0].rank == least
    assert rank_costs(plan)[least].memory == costs[least].memory + shard_memory(plan.placement("t").table, 50_000)


def test_an_asked_for_table_row_goes_to_the_least_loaded_host():
    # the larger table, placed first, loads host 0; the asked-for one goes to host 1
    first = TableSpec("big", 200_000, 64, sharding="table_row")
    plan = plan_tables([first, TableSpec("a", 100_000, 64, sharding="table_row")], BUDGETS, local_ranks=L)
    assert {s.rank for s in plan.placement("big").shards} == set(range(L))
    assert {s.rank for s in plan.placement("a").shards} == set(range(L, W))


def one_line_error(spec, budgets=BUDGETS, local_ranks=L):
    with pytest.raises(PlanError) as e:
        plan_tables([spec], budgets, local_ranks=local_ranks)
    assert len(str(e.value).splitlines()) == 1
    return str(e.value)


@pytest.mark.parametrize("kind", ["grid", "table_row"])
@pytest.mark.parametrize("local_ranks", [None, W])
def test_an_asked_for_2d_kind_on_one_host_says_to_pass_local_ranks(kind, local_ranks):
    msg = one_line_error(TableSpec("a", 1000, 64, sharding=kind), local_ranks=local_ranks)
    assert msg.startswith(f"cannot place table 'a' {kind}: it spreads over hosts, and all {W} ranks are on one")
    assert "pass local_ranks" in msg


def test_an_asked_for_grid_narrower_than_the_hosts_is_hierarchical_s_line():
    msg = one_line_error(TableSpec("a", 1000, 1, sharding="grid"))
    assert msg == ("grid: table 'a' of dim 1 cannot split its columns over 2 hosts; give it a dim >= 2, fewer hosts "
                   "(more local ranks), or shard it table_row")


@pytest.mark.parametrize("kind,remedy", [("grid", "more ranks"), ("table_row", "more ranks a host (local_ranks)")])
def test_an_asked_for_2d_kind_that_does_not_fit_says_what_it_needs_and_has(kind, remedy):
    spec = TableSpec("a", 100_000_000, 128, sharding=kind)
    need = shard_memory(spec, spec.rows // L, spec.dim // (W // L) if kind == "grid" else spec.dim).device
    msg = one_line_error(spec, [RankBudget(5 * GB)] * W)
    assert msg.startswith(f"cannot place table 'a' (100000000 rows x dim 128, sharding={kind!r}): its shard on rank "
                          f"0 (25000000 rows x {spec.dim // (W // L) if kind == 'grid' else 128} columns) needs "
                          f"{human_bytes(need)} of device and the rank has 5.00 GB free")
    assert "a larger device budget" in msg and remedy in msg
