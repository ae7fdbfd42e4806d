"""Run by test_two_d.py under ``mpiexec -n W`` with ``GPUEMB_LOCAL_RANKS`` declaring the hosts: table-row-wise and
grid placements (``sharding.hierarchical``) against one process on the same global batch.

``train SEED``: for each kind, three tables of three rules (row-wise Adagrad, whose grid shards add their
squared-gradient sums; Adam; Adagrad), dims 8, 8 and 6, single keys, then jagged bags summed, meaned and maxed;
every forward equals one ``EmbeddingCollection``'s on the global batch, then every row of every shard.
``save KIND SEED PREFIX``: train single keys and bags under KIND, write ``save_sharded(PREFIX)`` and, on rank 0,
the one process's tables beside it (``PREFIX.ref.h5``).
``load KIND PREFIX N``: load the N files into a fresh collection placed KIND on this world (or, on one rank, into
whole tables as well) and check every shard against the one process's rows. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import check_rows
from gpuemb import comm, optim
from gpuemb.distributed import ShardedEmbeddingCollection, load_sharded, load_sharded_tables, save_sharded
from gpuemb.distributed import shard_path
from gpuemb.distributed.hosts import local_ranks
from gpuemb.distributed.shards import LocalShard
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.sharding.hierarchical import plan_hosts
from gpuemb.sharding.spec import TableSpec
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig
from gpuemb.store.snapshot import save_snapshot

G, STEPS, TOL, KEYS = 8, 2, 1e-5, 30
DIMS = (8, 8, 6)
RULES = (optim.RowwiseAdagradRule(), optim.AdamRule(), optim.AdagradRule())


def configs():
    return [TableConfig(f"t{i}", d, "float32", Initializer("uniform", seed=i + 1), rule, 0.05)
            for i, (d, rule) in enumerate(zip(DIMS, RULES))]


def plan_of(kind, c):
    specs = [TableSpec.from_config(cfg, KEYS, sharding=kind) for cfg in configs()]
    return plan_hosts(specs, c.world_size, local_ranks(c), kind, 64)


def batch(rng, pooled):
    """A global batch: ``[G, 3]`` single keys, or jagged bags of 0 to 4 keys."""
    if not pooled:
        return rng.integers(0, KEYS, (G, 3))
    lengths = rng.integers(0, 5, (3, G))
    return JaggedFeatures.from_lengths(["a", "b", "c"], rng.integers(0, KEYS, int(lengths.sum())), lengths)


def train(kind, mode, pooled, c, rng, ref=None, dist=None):
    """Steps of the one process ``ref`` and this rank's ``dist`` on the same global batches, forwards compared."""
    the_plan = plan_of(kind, c)
    ref = ref or EmbeddingCollection(configs(), mode=mode, mixed_dims=True)
    dist = dist or ShardedEmbeddingCollection(configs(), c, the_plan, mode=mode, mixed_dims=True)
    mine = slice(c.rank * G // c.world_size, (c.rank + 1) * G // c.world_size)
    where = f"rank {c.rank}: {kind}, {mode}{' of bags' if pooled else ''}"
    for _ in range(STEPS):
        sparse = batch(rng, pooled)
        want, got = ref(sparse), dist(sparse[mine])
        np.testing.assert_allclose(got.data, want.data[mine], rtol=TOL, atol=TOL / 10, err_msg=where)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy[mine] * np.float32(c.world_size))
    check_rows({t.config.name: t for t in ref.tables}, dist.shards, the_plan, c.rank, TOL)
    return ref, dist


def main():
    c = comm.init()
    if sys.argv[1] == "train":
        for kind in ("table_row", "grid"):
            for mode, pooled in (("sum", False), ("sum", True), ("mean", True), ("max", True)):
                train(kind, mode, pooled, c, np.random.default_rng([int(sys.argv[2]), len(kind), len(mode)]))
    elif sys.argv[1] == "save":
        kind, rng, prefix = sys.argv[2], np.random.default_rng(int(sys.argv[3])), sys.argv[4]
        ref, dist = train(kind, "sum", False, c, rng)
        train(kind, "sum", True, c, rng, ref, dist)
        save_sharded(dist, prefix)
        if c.rank == 0:
            save_snapshot({t.config.name: t for t in ref.tables}, f"{prefix}.ref.h5")
    else:
        kind, prefix, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        files = [shard_path(prefix, r, n) for r in range(n)]
        ref = EmbeddingCollection(configs(), mixed_dims=True)
        load_sharded_tables({t.config.name: t for t in ref.tables}, [f"{prefix}.ref.h5"])
        the_plan = plan_of(kind, c)
        dist = ShardedEmbeddingCollection(configs(), c, the_plan, mixed_dims=True)
        load_sharded(dist, files)
        check_rows({t.config.name: t for t in ref.tables}, dist.shards, the_plan, c.rank, TOL)
        if c.world_size == 1:  # whole tables of one process, joined from the N files
            whole = EmbeddingCollection(configs(), mixed_dims=True)
            load_sharded_tables({t.config.name: t for t in whole.tables}, files)
            check_rows({t.config.name: t for t in ref.tables}, {t.config.name: _whole(t) for t in whole.tables},
                       the_plan, 0, TOL)
    print(f"rank {c.rank}: ok", flush=True)


def _whole(table):
    return LocalShard(table.config.name, "table", (0, table.config.dim), table)


main()
