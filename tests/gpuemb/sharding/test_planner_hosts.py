"""The planner over several hosts: table_row where it is estimated faster than row-wise, and nothing new on one
host."""
import dataclasses

import pytest

from gpuemb import comm, models
from gpuemb.comm.link import PRESETS as LINKS
from gpuemb.distributed import ShardedEmbeddingCollection, distribute, plan_for
from gpuemb.sharding.estimate import estimate_step
from gpuemb.sharding.plan import Plan
from gpuemb.sharding.planner import plan_tables
from gpuemb.sharding.profile import PROFILES
from gpuemb.sharding.spec import RankBudget, TableSpec
from gpuemb.store.options import TableConfig

BUDGETS = [RankBudget(1 << 30)] * 4  # 4 ranks of 1 GiB of device


def big(lookups, pooling="sum"):
    """Two tables of 4M rows of dim 64 (1.24 GB each with row-wise Adagrad's state and the index): no rank holds
    one, two ranks hold its halves."""
    return [TableSpec(n, 4_000_000, 64, lookups_per_sample=lookups, pooling=pooling) for n in "ab"]


def step_s(plan):
    return estimate_step(plan, LINKS["ib100"], PROFILES["h200"], local_link=LINKS["nvlink4"]).step_s


def test_pooled_bags_too_big_for_a_rank_go_table_row_over_two_hosts():
    # 20 keys a bag: row-wise, each rank gets a pooled row from each of the 2 owners on the other host, per table;
    # table_row, from the 2 owners of the one table on the other host: half the bytes over InfiniBand
    auto = plan_tables(big(20), BUDGETS, local_ranks=2)
    assert [(p.kind, sorted(s.rank for s in p.shards)) for p in auto.placements] == [("table_row", [0, 1]),
                                                                                    ("table_row", [2, 3])]
    assert "faster than row-wise" in auto.placements[0].reason
    row = plan_tables([dataclasses.replace(t, sharding="row") for t in big(20)], BUDGETS, local_ranks=2)
    assert step_s(auto) < step_s(row)
    assert Plan.from_json(auto.to_json()) == auto


def test_one_key_a_sample_stays_row_wise():
    # one key a sample: as many bytes cross between hosts either way, so the planner keeps row-wise
    assert [p.kind for p in plan_tables(big(1), BUDGETS, local_ranks=2).placements] == ["row", "row"]


@pytest.mark.parametrize("local_ranks", [None, 4])
def test_one_host_plans_as_before(local_ranks):
    plan = plan_tables(big(20), BUDGETS, local_ranks=local_ranks)
    assert [p.kind for p in plan.placements] == ["row", "row"] and plan.local_ranks == local_ranks


def test_plan_for_passes_the_hosts_on():
    configs = [TableConfig(n, 64) for n in "ab"]
    plan = plan_for(configs, 4, rows=4_000_000, device_bytes=1 << 30, local_ranks=2)
    assert plan.local_ranks == 2 and {p.kind for p in plan.placements} == {"row"}  # one key a sample


def test_hosts_must_divide_the_ranks():
    with pytest.raises(ValueError, match="local_ranks: 3 ranks a host do not divide the 4"):
        plan_tables(big(20), BUDGETS, local_ranks=3)


def test_plan_for_weighs_a_multi_hot_features_bag_of_keys():
    """A table too large for one rank, over 2 hosts of 2: one key a sample stays row-wise (above), a bag of 20 keys
    a sample goes table-row-wise, as the planner weighs its partials; distribute passes a model's hotness on."""
    configs = [TableConfig(n, 64) for n in "ab"]
    plan = plan_for(configs, 4, rows=4_000_000, device_bytes=1 << 30, local_ranks=2, hotness={"a": 20})
    assert [(p.table.lookups_per_sample, p.kind) for p in plan.placements] == [(20, "table_row"), (1, "row")]
    model = models.build("dlrm", 4, [TableConfig(n, 8) for n in "abc"], hotness=(3, 1, 2))
    distribute(model, comm.LocalCommunicator())
    assert [p.table.lookups_per_sample for p in model.embeddings.plan.placements] == [3, 1, 2]
    alone = ShardedEmbeddingCollection([TableConfig(n, 8) for n in "ab"], comm.LocalCommunicator(), hotness=(4, 2))
    assert [p.table.lookups_per_sample for p in alone.plan.placements] == [4, 2]
