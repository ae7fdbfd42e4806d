"""The cost model against bytes worked out by hand, and its per-key constants against the store itself."""
import pytest

from gpuemb import optim
from gpuemb.distributed import plan_for
from gpuemb.kernels.codecs import CODECS
from gpuemb.sharding.cost import (CODEC_BYTES, HOME_META_BYTES, INDEX_BYTES, SLOT_BYTES, STEP_BYTES, USED_FLAG_BYTES,
                                  Memory, RankCost, placement_costs, rank_costs, row_bytes, shard_memory, vector_bytes)
from gpuemb.sharding.plan import Placement, Plan, Shard
from gpuemb.sharding.spec import RankBudget, TableSpec
from gpuemb.store.options import StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

SGD8 = TableSpec("t", 1000, 8, lookups_per_sample=2, rule="SGDRule")  # a row is 8 float32: 32 bytes


def test_memory_per_home_by_hand():
    assert shard_memory(SGD8, 1000) == Memory(device=1000 * (32 + 24 + 26))
    assert shard_memory(SGD8, 1000, home="host", cache_rows=100) == Memory(
        device=100 * (32 + 24 + 26), host=1000 * (32 + 24), host_meta=1000 * (4 + 1))
    assert shard_memory(SGD8, 1000, home="ssd", cache_rows=100) == Memory(
        device=100 * (32 + 24 + 26), host=1000 * 24, ssd=1000 * (32 + 4), host_meta=1000 * 1)
    half = TableSpec("h", 10, 8, dtype="float16", rule="RowwiseAdagradRule")  # 8 weights + 1 accumulator
    # a float16 table keeps its weights in float16 and its state in float32: 4 weights x 2 + 1 accumulator x 4
    assert shard_memory(half, 10, cols=4).device == 10 * (4 * 2 + 4 + 24 + 26)
    with pytest.raises(ValueError, match="home='tape'"):
        shard_memory(SGD8, 10, home="tape")


def bookkeeping_per_slot(level):
    """A level's bytes beside its index, allocator and counters: its per-slot arrays and its policy's."""
    return level.overhead_bytes - level.index.nbytes - level.alloc.overhead_bytes - level.counters.nbytes


@pytest.mark.parametrize("n", [3000, 20000])
def test_per_key_constants_match_the_store(n, rng):
    keys = rng.choice(1 << 40, n, replace=False)
    device = EmbeddingTable(TableConfig("d", 8, options=StoreOptions(slab_rows=1024)))
    device.lookup(keys)
    level = device.top  # an unbounded device home: only update counts, on the device, one spare row; none freed
    assert bookkeeping_per_slot(level) / (level.tier.capacity + 1) == STEP_BYTES < SLOT_BYTES  # charged as bounded
    assert level.alloc.overhead_bytes == 8 + 16  # the free stack's spare entry and its two counters
    assert INDEX_BYTES / 2 <= level.index.nbytes / len(level) <= INDEX_BYTES  # a bound, and not a loose one

    cached = EmbeddingTable(TableConfig("h", 8, options=StoreOptions("host", cache_rows=512, slab_rows=1024)))
    for batch in keys.reshape(-1, 200):  # the cache evicts and frees rows; the home keeps them all
        cached.lookup(batch).sum().backward()
    cache = cached.top  # a bounded device level: all of SLOT_BYTES; its free stack holds at most the rows it freed
    assert bookkeeping_per_slot(cache) / (cache.tier.capacity + 1) == SLOT_BYTES == 26
    assert 8 + 16 < cache.alloc.overhead_bytes <= 8 * (cache.tier.capacity + 1) + 16
    home = cached.home  # a host home: update counts in NumPy, grown a quarter ahead, and the allocator's flags
    assert len(home) == n and STEP_BYTES <= bookkeeping_per_slot(home) / home.tier.capacity <= 1.25 * STEP_BYTES
    assert home.alloc.overhead_bytes / len(home) <= 1.25 * USED_FLAG_BYTES
    assert HOME_META_BYTES["host"] == STEP_BYTES + USED_FLAG_BYTES


def test_an_ssd_home_keeps_only_its_used_flags_in_memory(tmp_path, rng):
    options = StoreOptions("ssd", cache_rows=512, ssd_path=str(tmp_path / "t.h5"), slab_rows=1024, chunk_rows=64)
    ssd = EmbeddingTable(TableConfig("s", 8, options=options))
    for batch in rng.choice(1 << 40, 3000, replace=False).reshape(-1, 200):
        ssd.lookup(batch).sum().backward()
    home = ssd.home  # the update counts are in the file, each beside its row
    assert len(home) == 3000 and bookkeeping_per_slot(home) == 0 and HOME_META_BYTES["ssd"] == USED_FLAG_BYTES
    assert home.tier.record.itemsize == row_bytes(SGD8) + STEP_BYTES
    ssd.close()


def test_codec_bytes():
    assert set(CODEC_BYTES) == set(CODECS)
    assert [vector_bytes(64, c) for c in ("fp32", "fp16", "bf16", "int8")] == [256, 128, 128, 64 + 4]
    with pytest.raises(ValueError, match="codec='fp8'"):
        vector_bytes(64, "fp8")


def _costs(kind, shards, spec=SGD8, codec="int8", W=4, B=400):
    return placement_costs(Placement(spec, kind, tuple(shards)), W, B, codec)


def test_table_wise_traffic_by_hand():
    # W=4, B=400: b=100 samples a rank, 2 keys each. The owner sees min(800, 1000) rows: 96 bytes each (8 weights
    # read, 8 read + 8 written in the update). A non-owner sends 200 keys (1600 B) and its 100 bags' lengths (800 B),
    # and gets 100 pooled int8 rows (8 + 4 scale = 12 B) back, whose gradients it returns; the owner sends 3 x 1200 B
    # of rows.
    costs = _costs("table", [Shard(1, 1000, (0, 8))])
    assert costs[1] == RankCost(memory=shard_memory(SGD8, 1000), lookup=800 * 96, a2a_fwd=3 * 1200, shards=1)
    for r in (0, 2, 3):
        assert costs[r] == RankCost(a2a_fwd=1600 + 800, a2a_bwd=1200)


@pytest.mark.parametrize("pooling,vectors", [("sum", 100 * (1 - 0.75 ** 2)), (None, 50)])
def test_row_wise_traffic_by_hand(pooling, vectors):
    # 250 rows a rank, a quarter of the 800 keys: 200 unique rows at most. To each other owner a rank sends 50 keys
    # (400 B), and pooled the lengths of its sub-bags there (8 B each); an owner returns a row per bag with a key in
    # its shard, b·(1 - (3/4)^2) = 43.75 bags (pooled), or one per key (unpooled), 12 B each, and gets as many
    # gradients back.
    spec = TableSpec("t", 1000, 8, lookups_per_sample=2, pooling=pooling, rule="SGDRule")
    costs = _costs("row", [Shard(r, 250, (0, 8), residue=r) for r in range(4)], spec)
    v, lengths = vectors * 12, vectors * 8 if pooling else 0
    for c in costs:
        assert c == RankCost(memory=shard_memory(spec, 250), lookup=200 * 96, a2a_fwd=3 * (400 + lengths) + 3 * v,
                             a2a_bwd=3 * v, shards=1)


def test_column_wise_traffic_by_hand():
    # two shards of 4 columns on ranks 0 and 2, fp32 on the wire: 48 lookup bytes a row (4 read, 4 + 4 updated),
    # all 800 keys to each shard with the 100 bags' lengths (800 B), 100 rows of 16 B back per requester.
    costs = _costs("column", [Shard(0, 1000, (0, 4)), Shard(2, 1000, (4, 8))], codec="fp32")
    mem = shard_memory(SGD8, 1000, cols=4)
    for owner, other in ((0, 2), (2, 0)):
        assert costs[owner] == RankCost(memory=mem, lookup=800 * 48, a2a_fwd=3 * 1600 + 2400, a2a_bwd=1600,
                                        shards=1)
    for r in (1, 3):
        assert costs[r] == RankCost(a2a_fwd=2 * 2400, a2a_bwd=2 * 1600)


def test_data_parallel_traffic_by_hand():
    # 50 rows: each replica reads min(200, 50) rows' weights for its own batch and updates min(800, 50) rows, and
    # sends 2·3/4 of the 1600-byte gradient in the ring allreduce.
    spec = TableSpec("d", 50, 8, lookups_per_sample=2, rule="SGDRule")
    costs = _costs("data", [Shard(r, 50, (0, 8)) for r in range(4)], spec)
    for c in costs:
        assert c == RankCost(memory=shard_memory(spec, 50), lookup=50 * 32 + 50 * 64, allreduce=2400, shards=1)


def test_one_rank_sends_nothing_and_plan_costs_add_up(rng):
    spec = TableSpec("t", int(rng.integers(100, 10_000)), 8, rule="SGDRule")
    alone = _costs("table", [Shard(0, spec.rows, (0, 8))], spec, W=1)
    assert alone[0].a2a_fwd == alone[0].a2a_bwd == alone[0].allreduce == 0 and alone[0].lookup > 0
    dp = TableSpec("d", 50, 8, rule="SGDRule")
    placements = (Placement(spec, "table", (Shard(1, spec.rows, (0, 8)),)),
                  Placement(dp, "data", (Shard(0, 50, (0, 8)), Shard(1, 50, (0, 8)))))
    plan = Plan((RankBudget(10 ** 9),) * 2, placements, 400, "fp16")
    parts = [placement_costs(p, 2, 400, "fp16") for p in placements]
    assert rank_costs(plan) == [a + b for a, b in zip(*parts)]
    assert rank_costs(plan)[1].shards == 2 and rank_costs(plan)[1].load == sum(
        p[1].lookup + p[1].a2a_fwd + p[1].a2a_bwd + p[1].allreduce for p in parts)
    assert optim.row_width(optim.SGDRule(), 8) * 4 == 32  # the row size the hand-worked numbers above assume


@pytest.mark.parametrize("kind", ["table_row", "grid"])
def test_a_plans_2d_placement_costs_its_column_ranges_as_row_wise_tables(kind):
    from gpuemb.sharding.cost import rank_costs
    from gpuemb.sharding.hierarchical import host_placement_costs, plan_hosts
    plan = plan_hosts([TableSpec("a", 4000, 8, rule="SGDRule"), TableSpec("b", 2000, 8, rule="SGDRule")], 4, 2, kind,
                      batch_size=256)
    want = [RankCost() for _ in range(4)]
    for p in plan.placements:
        assert p.kind == kind
        want = [w + c for w, c in zip(want, host_placement_costs(p, 4, 256, plan.codec))]
    assert rank_costs(plan) == want and any(c.a2a_fwd for c in want)


def test_a_table_shared_by_features_costs_a_vector_a_feature():
    # the exchange sends each of a shared table's 26 features its own row (workers/row_bags.py measures it); pooled,
    # the model counted one a sample, 26 times too few
    plan = plan_for([TableConfig("t", 8)], 2, n_features=26, batch_size=400)
    (p,) = plan.placements
    assert (p.kind, p.table.pooling, p.table.lookups_per_sample) == ("table", None, 26)
    requester = 1 - p.shards[0].rank
    assert placement_costs(p, 2, 400, "fp32")[requester].a2a_bwd == 200 * 26 * vector_bytes(8, "fp32")
