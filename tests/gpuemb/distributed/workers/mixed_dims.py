"""Run by test_mixed_dims.py under ``mpiexec -n W``: a collection of tables of dims 4, 8 and 16 (and a data-parallel
one of dim 6), sharded table-, row- and column-wise (the dim-16 table split into columns [0, 5) and [5, 16), the
dim-8 one into [0, 3) and [3, 8)), each rank on its 1/W of a global batch, against one ``EmbeddingCollection`` of
``mixed_dims`` on the whole batch: single keys, then jagged bags summed and maxed; every forward ``[B, width]``,
then every row of every shard. argv: a seed, and "overlapped" to run on an OverlappedCommunicator. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import check_rows
from gpuemb import comm, optim
from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

SEED, G, STEPS, TOL, KEYS = int(sys.argv[1]), 12, 3, 1e-5, 40
DIMS = (4, 8, 16, 6)
RULES = (optim.AdagradRule(), optim.RowwiseAdagradRule(), optim.AdamRule(), optim.SGDRule())


def configs():
    return [TableConfig(f"t{i}", d, "float32", Initializer("uniform", seed=i + 1), rule, 0.05)
            for i, (d, rule) in enumerate(zip(DIMS, RULES))]


def plan_of(kind, W):
    """The first three tables placed by ``kind`` (table-wise on ranks 0, 1, 2 mod W; by columns on the last two
    ranks, or whole on a world of one), the last one data-parallel."""
    placements = []
    for i, c in enumerate(configs()):
        spec, d = TableSpec.from_config(c, KEYS), c.dim
        if i == 3:
            shards, how = tuple(Shard(r, KEYS, (0, d)) for r in range(W)), "data"
        elif kind == "row":
            shards, how = tuple(Shard(r, KEYS, (0, d), residue=r) for r in range(W)), "row"
        elif kind == "column" and W > 1 and d > 4:
            cut = {8: 3, 16: 5}[d]
            shards, how = (Shard(W - 1, KEYS, (0, cut)), Shard(W - 2, KEYS, (cut, d))), "column"
        else:
            shards, how = (Shard(i % W, KEYS, (0, d)),), "table"
        placements.append(Placement(spec, how, shards))
    return Plan((RankBudget(1 << 30),) * W, tuple(placements), 64, "fp32")


def batches(rng, pooled):
    """A global batch: ``[G, 4]`` single keys, or jagged bags of 0 to 4 keys."""
    if not pooled:
        return rng.integers(0, KEYS, (G, 4))
    lengths = rng.integers(0, 5, (4, G))
    return JaggedFeatures.from_lengths([f"f{i}" for i in range(4)], rng.integers(0, KEYS, int(lengths.sum())),
                                       lengths)


def check(kind, mode, pooled, c, mine):
    rng = np.random.default_rng([SEED, ["table", "row", "column"].index(kind), ["sum", "max"].index(mode),
                                 int(pooled)])
    the_plan = plan_of(kind, c.world_size)
    ref = EmbeddingCollection(configs(), mode=mode, mixed_dims=True)
    dist = ShardedEmbeddingCollection(configs(), c, the_plan, mode=mode, mixed_dims=True)
    assert dist.dims == ref.dims and dist.width == ref.width == sum(DIMS)
    where = f"rank {c.rank}: {kind}-wise, {mode}{' of bags' if pooled else ''}"
    for _ in range(STEPS):
        sparse = batches(rng, pooled)
        want, got = ref(sparse), dist(sparse[mine])
        assert got.shape == (G // c.world_size, sum(DIMS)), (where, got.shape)
        np.testing.assert_allclose(got.data, want.data[mine], rtol=TOL, atol=TOL / 10, err_msg=where)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy[mine] * np.float32(c.world_size))
    dist.settle()  # on an overlapped communicator the last backward's row updates wait for this (row_updates.py)
    check_rows({t.config.name: t for t in ref.tables}, dist.shards, the_plan, c.rank, TOL)


def main():
    c = comm.init()
    if sys.argv[2:] == ["overlapped"]:  # the rows arrive when the output is first read (exchange.py)
        c = comm.OverlappedCommunicator(c)
    mine = slice(c.rank * G // c.world_size, (c.rank + 1) * G // c.world_size)
    for kind in ("table", "row", "column"):
        for mode, pooled in (("sum", False), ("sum", True), ("max", True)):
            check(kind, mode, pooled, c, mine)
    print(f"rank {c.rank}: ok", flush=True)


main()
