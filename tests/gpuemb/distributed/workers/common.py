"""What the mpiexec workers share: the tables, plans of each kind over W ranks, a small DLRM and its batches.

Every rank rebuilds the same inputs from the seed, so each can train the one-process reference itself and compare
its own shards with it.
"""
import os

import numpy as np

from gpuemb import models, optim
from gpuemb.distributed.layout import shard_rows
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.store.options import Initializer, TableConfig

D, N_DENSE, KEYS = 8, 4, 60


def configs(dtype=os.environ.get("DIST_TEST_DTYPE", "float32")):
    """Four tables of four rules (the last one is the data-parallel one), in ``dtype`` (default: float32, or
    ``$DIST_TEST_DTYPE``)."""
    rules = [(optim.RowwiseAdagradRule(), 0.1), (optim.AdamRule(), 0.01), (optim.AdagradRule(), 0.1),
             (optim.RowwiseAdagradRule(), 0.1)]
    return [TableConfig(f"t{i}", D, dtype, Initializer("uniform", seed=i + 1), rule, lr)
            for i, (rule, lr) in enumerate(rules)]


def placement(config, kind, W, rank=0):
    spec = TableSpec.from_config(config, KEYS)
    if kind == "table":
        shards = (Shard(rank % W, KEYS, (0, D)),)
    elif kind == "row":
        shards = tuple(Shard(r, KEYS, (0, D), residue=r) for r in range(W))
    elif kind == "column":
        shards = tuple(Shard(r, KEYS, (D * r // W, D * (r + 1) // W)) for r in range(W))
    else:
        shards = tuple(Shard(r, KEYS, (0, D)) for r in range(W))
    return Placement(spec, kind, shards)


def plan(kinds, W):
    """The four tables placed by ``kinds`` (one each; table-wise tables go on ranks 0, 1, 2 mod W), or by one kind
    for the first three and data-parallel for the last."""
    kinds = [kinds] * 3 + ["data"] if isinstance(kinds, str) else kinds
    placements = tuple(placement(c, k, W, i) for i, (c, k) in enumerate(zip(configs(), kinds)))
    return Plan((RankBudget(1 << 30),) * W, placements, 64, "fp32")


def dlrm(tables=None, hotness=None):
    return models.build("dlrm", N_DENSE, tables or configs(), seed=5, bottom=(16,), top=(16,), hotness=hotness)


def batch(seed, step, G, F=4):
    """The global batch of ``step``: dense [G, 4], sparse [G, F] with repeats across ranks, labels [G]."""
    rng = np.random.default_rng([seed, step])
    return (rng.standard_normal((G, N_DENSE)).astype(np.float32), rng.integers(0, KEYS, (G, F)),
            rng.integers(0, 2, G).astype(np.float32))



def check_rows(tables, shards, the_plan, rank, tol):
    """Every row (weights, optimizer state, step count) of every shard this rank holds (``{name: LocalShard}``)
    equals, within ``tol``, the one-process table's (``tables``: ``{name: EmbeddingTable}``) keys it owns and
    columns it holds."""
    for name, shard in shards.items():
        table = tables[name]
        keys, rows, steps = map(np.concatenate, zip(*table.export()))
        rows = table.format.unpack(rows)  # float16 tables: float32 working rows
        if shard.kind in ("row", "table_row", "grid"):  # a grid: the owner of each column range
            keep = (the_plan.owner_of(name, keys).reshape(keys.size, -1) == rank).any(axis=1)
            keys, rows, steps = keys[keep], rows[keep], steps[keep]
        if tuple(shard.cols) != (0, table.config.dim):
            dim = table.config.dim
            layout = {p: [s.start, s.stop] for p, s in optim.row_layout(table.rule, dim).items()}
            rows = shard_rows(rows, layout, dim, shard.cols, table.rule)
        where = f"rank {rank}: table {name} ({shard.kind}, cols {shard.cols})"
        parts = list(shard.table.export())
        if not parts:  # no key of the batches went to this shard
            assert keys.size == 0, where
            continue
        got_keys, got_rows, got_steps = map(np.concatenate, zip(*parts))
        got_rows = shard.table.format.unpack(got_rows)
        order, got_order = np.argsort(keys), np.argsort(got_keys)
        np.testing.assert_array_equal(got_keys[got_order], keys[order], err_msg=where)
        np.testing.assert_allclose(got_rows[got_order], rows[order], rtol=tol, atol=tol / 10, err_msg=where)
        np.testing.assert_array_equal(got_steps[got_order], steps[order], err_msg=where)


def assert_same_bits(rank, blocking, overlapped):
    """Two runs' ``(losses, dense parameters, {table: exported rows})`` are the same bits."""
    for a, b in zip(blocking[0], overlapped[0]):
        assert np.array_equal(a, b), f"rank {rank}: a loss moved: {a} against {b}"
    for a, b in zip(blocking[1], overlapped[1]):
        assert np.array_equal(a, b), f"rank {rank}: a dense parameter moved"
    for name in blocking[2]:
        for part_a, part_b in zip(blocking[2][name], overlapped[2][name]):
            for x, y in zip(part_a, part_b):
                assert np.array_equal(x, y), f"rank {rank}: table {name} moved"
