"""Table-row-wise and grid placements (``sharding.hierarchical``, hosts as the second axis): their plans, owners,
costs and refusals; a world of one under each against ``EmbeddingCollection``; and, under ``mpiexec -n 4``
declared as 2 hosts of 2 (workers/two_d.py), single keys and bags against one process, and checkpoints that
reshard 4 -> 2, 4 -> 1 and 2 -> 4."""
import dataclasses

import numpy as np
import pytest

from gpuemb import comm, optim
from gpuemb.distributed import ShardedEmbeddingCollection, plan_for
from gpuemb.distributed.hosts import LOCAL_RANKS_ENV, local_ranks
from gpuemb.comm.link import PRESETS as LINKS
from gpuemb.sharding.cost import placement_costs, rank_costs
from gpuemb.sharding.estimate import estimate_step
from gpuemb.sharding.hierarchical import check_hosts, grid_placement, host_placement_costs, plan_hosts
from gpuemb.sharding.plan import Placement, Plan, Shard
from gpuemb.sharding.planner import plan_tables
from gpuemb.sharding.profile import PROFILES
from gpuemb.sharding.spec import RankBudget, TableSpec
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

SPECS = [TableSpec("a", 1000, 8), TableSpec("b", 4000, 8), TableSpec("c", 2000, 6)]


def test_table_row_puts_each_table_on_one_host_largest_first():
    plan = plan_hosts(SPECS, 4, 2, "table_row")
    hosts = {p.table.name: sorted(s.rank for s in p.shards) for p in plan.placements}
    assert hosts == {"b": [0, 1], "c": [2, 3], "a": [2, 3]}
    assert Plan.from_json(plan.to_json()) == plan and plan.local_ranks == 2


def test_grid_splits_columns_over_hosts_and_rows_within(rng):
    plan = plan_hosts(SPECS, 4, 2, "grid")
    assert [(s.rank, s.cols, s.residue) for s in plan.placement("c").shards] == [
        (0, (0, 3), 0), (1, (0, 3), 1), (2, (3, 6), 0), (3, (3, 6), 1)]
    keys = rng.integers(0, 1 << 40, 1000)
    owners = plan.owner_of("c", keys)
    assert owners.shape == (1000, 2) and set(owners[:, 0]) == {0, 1}
    np.testing.assert_array_equal(owners[:, 1], owners[:, 0] + 2)  # a key's residue is the same in every range
    assert plan_hosts(SPECS, 4, 2, "table_row").owner_of("b", keys).shape == (1000,)


def test_a_host_layout_that_does_not_divide_the_ranks_is_one_line(monkeypatch):
    with pytest.raises(ValueError, match=r"^local_ranks: 3 ranks a host do not divide the 4 ranks; .*divisor of 4$"):
        check_hosts(4, 3)
    with pytest.raises(ValueError, match="^Plan: local_ranks: 3 ranks a host do not divide the 4 ranks"):
        Plan((RankBudget(1 << 30),) * 4, (), 64, "fp32", 3)
    monkeypatch.setenv(LOCAL_RANKS_ENV, "2")
    with pytest.raises(ValueError, match=f"^{LOCAL_RANKS_ENV}: 2 ranks a host do not divide the 1 ranks"):
        local_ranks(comm.LocalCommunicator())
    monkeypatch.setenv(LOCAL_RANKS_ENV, "two")
    with pytest.raises(ValueError, match=f"^{LOCAL_RANKS_ENV}='two': give the ranks of one host"):
        local_ranks(comm.LocalCommunicator())


def test_a_grid_that_does_not_fit_the_dims_is_one_line():
    with pytest.raises(ValueError, match=r"^grid: table 'c' of dim 6 cannot split its columns over 8 hosts; .*"):
        grid_placement(SPECS[2], 8, 1)
    with pytest.raises(ValueError, match="cannot split its columns over 8 hosts"):
        plan_for([TableConfig("c", 6)], 8, sharding="grid", local_ranks=1)


def test_a_plan_refuses_row_shards_that_leave_their_host():
    spec = SPECS[0]
    across = tuple(Shard(r, 500, (0, 8), residue=i) for i, r in enumerate((1, 2)))
    with pytest.raises(ValueError, match=r"^Plan: table 'a': columns \(0, 8\) are row-wise over ranks \[1, 2\]; "):
        Plan((RankBudget(1 << 30),) * 4, (Placement(spec, "table_row", across),), 64, "fp32", 2)
    with pytest.raises(ValueError, match="needs the plan's local_ranks"):
        Plan((RankBudget(1 << 30),) * 4, (Placement(spec, "table_row", across),), 64, "fp32")


def test_a_host_placement_costs_a_row_wise_table_of_its_ranks_per_column_range():
    unpooled = [dataclasses.replace(s, pooling=None) for s in SPECS]  # single keys: nothing is relayed
    plan = plan_hosts(unpooled, 4, 2, "grid", batch_size=400, codec="int8")
    grid = host_placement_costs(plan.placement("b"), 4, 400, "int8")
    # each range on one host is a row-wise table of 2 ranks: half the keys, half the columns
    half = TableSpec("b", 4000, 4, pooling=None)
    by_hand = [sum((placement_costs(Placement(half, "row", tuple(Shard(h * 2 + i, 2000, (0, 4), residue=i)
                                                                       for i in range(2))), 4, 400, "int8")[r]
                    for h in range(2)), start=type(grid[0])()) for r in range(4)]
    assert [c.memory for c in grid] == [c.memory for c in by_hand]
    assert [round(c.a2a_fwd + c.a2a_bwd) for c in grid] == [round(c.a2a_fwd + c.a2a_bwd) for c in by_hand]
    table_row = host_placement_costs(plan_hosts(SPECS, 4, 2, "table_row").placement("b"), 4, 400, "int8")
    assert table_row[2].memory.device == table_row[3].memory.device == 0 < table_row[0].memory.device


@pytest.mark.parametrize("kind", ["table_row", "grid", "row", "mixed"])
def test_relayed_bags_cost_what_the_step_estimate_sends(kind):
    # pooled bags of 3 keys over 2 hosts of 2 go by the relay: the cost model's bytes a rank, keys in a2a_fwd, are
    # the estimate's (which follows the collectives) less the per-stream counts it adds, 8 B a stream and peer.
    # Row-wise tables over all 4 ranks are relayed too (their owners are on both hosts), and so is a plan mixing
    # them with table-wise and 2-D ones.
    specs = [dataclasses.replace(s, lookups_per_sample=3.0) for s in SPECS]
    if kind in ("table_row", "grid"):
        plan = plan_hosts(specs, 4, 2, kind, batch_size=400)
    else:
        kinds = ["row"] * 3 if kind == "row" else ["row", "table_row", "table"]
        specs = [dataclasses.replace(s, sharding=k) for s, k in zip(specs, kinds)]
        plan = plan_tables(specs, [RankBudget(1 << 30)] * 4, batch_size=400, local_ranks=2)
        assert [p.kind for p in plan.placements] == kinds
    est = estimate_step(plan, LINKS["ib100"], PROFILES["h200"])
    streams = sum(len({s.cols for s in p.shards}) for p in plan.placements)
    for cost, rank in zip(rank_costs(plan), est.ranks):
        sent = rank.sent["a2a_keys"] - 3 * streams * 8 + rank.sent["a2a_fwd"] + rank.sent["a2a_bwd"]
        assert cost.a2a_fwd + cost.a2a_bwd == pytest.approx(sent, rel=1e-12)


@pytest.mark.parametrize("kind", ["table_row", "grid"])
@pytest.mark.parametrize("pooled", [False, True])
def test_a_world_of_one_trains_like_an_embedding_collection(kind, pooled, rng):
    configs = [TableConfig(f"t{i}", d, initializer=Initializer("uniform", seed=i + 1), rule=optim.AdagradRule())
               for i, d in enumerate((4, 8))]
    ref = EmbeddingCollection(configs, mixed_dims=True)
    one = ShardedEmbeddingCollection(configs, comm.LocalCommunicator(), plan_for(configs, 1, sharding=kind),
                                     mixed_dims=True)
    for _ in range(2):
        sparse = [(rng.integers(0, 30, 7), np.array([0, 2, 2, 3, 6, 7]))] * 2 if pooled else rng.integers(0, 30, (5, 2))
        want, got = ref(sparse), one(sparse)
        np.testing.assert_array_equal(got.data, want.data)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy)
    np.testing.assert_array_equal(one(sparse).data, ref(sparse).data)


@pytest.mark.slow
def test_four_ranks_as_two_hosts_train_like_one_process(rng, mpiexec):
    mpiexec(4, "two_d.py", "train", rng.integers(1 << 30), timeout_s=300, **{LOCAL_RANKS_ENV: "2"})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["table_row", "grid"])
def test_a_checkpoint_reshards_4_to_2_and_1_and_2_to_4(kind, rng, tmp_path, mpiexec):
    four, two = tmp_path / "four", tmp_path / "two"
    mpiexec(4, "two_d.py", "save", kind, rng.integers(1 << 30), four, timeout_s=300, **{LOCAL_RANKS_ENV: "2"})
    mpiexec(2, "two_d.py", "load", kind, four, 4, **{LOCAL_RANKS_ENV: "1"})  # 2 hosts of 1
    mpiexec(1, "two_d.py", "load", kind, four, 4)
    mpiexec(2, "two_d.py", "save", kind, rng.integers(1 << 30), two, **{LOCAL_RANKS_ENV: "2"})  # 1 host of 2
    mpiexec(4, "two_d.py", "load", kind, two, 2, timeout_s=300, **{LOCAL_RANKS_ENV: "2"})
