"""Run by test_mpi.py under ``mpiexec -n W``: sharded snapshots written by N ranks and loaded by M.

``save KINDS SEED PREFIX``: train the DLRM of common.py on W ranks under ``plan(KINDS, W)`` for a few steps and
write ``save_sharded(PREFIX)``.
``load KINDS SEED PREFIX N``: build it fresh on W ranks under ``plan(KINDS, W)``, ``load_sharded`` the N files,
and check every shard against whole rows joined here, in NumPy, from all N files: the same keys (those the rank
owns), weights, state and steps, bit for bit. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import D, batch, dlrm, plan
from gpuemb import comm, optim
from gpuemb.autograd import Tensor, bce_with_logits
from gpuemb.distributed import distribute, load_sharded, save_sharded, shard_path
from gpuemb.store.snapshot import read_snapshot

MODE, KINDS, SEED, PREFIX = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4]
G, STEPS = 24, 3


def save(c, model):
    b = G // c.world_size
    mine = slice(c.rank * b, (c.rank + 1) * b)
    allreduce = distribute(model, c, plan(KINDS, c.world_size))
    opt = optim.SGD(model.parameters(), 0.05)
    for step in range(STEPS):
        dense, sparse, y = batch(SEED, step, G)
        opt.zero_grad()
        bce_with_logits(model(dense[mine], sparse[mine]), Tensor(y[mine])).backward()
        allreduce()
        opt.step()
    save_sharded(model.embeddings, PREFIX)


def whole_rows(paths):
    """``{table: (keys, rows [n, width], steps, rule, per_row)}`` joined from every file: columns in column order;
    a column-wise row-wise Adagrad table also gives ``per_row``, ``{cols: accumulators}`` of each old shard."""
    parts = {}
    for path in paths:
        snap = read_snapshot(path)
        for name, info in snap.meta["sharded"]["shards"].items():
            t = snap.tables[name].load_all()
            order = np.argsort(t.keys)
            parts.setdefault(name, []).append((tuple(info["cols"]), t.keys[order], t.rows[order], t.steps[order]))
    out = {}
    for name, pieces in parts.items():
        per_row = None
        pieces.sort(key=lambda p: p[0])
        rule = optim.AdamRule() if name == "t1" else optim.AdagradRule() if name == "t2" else optim.RowwiseAdagradRule()
        if pieces[0][0] == (0, D):  # row-, table-wise or data-parallel: each piece holds whole rows
            keys, rows, steps = (np.concatenate([p[i] for p in pieces]) for i in (1, 2, 3))
            order = np.argsort(keys)
            keys, rows, steps = keys[order], rows[order], steps[order]
        else:  # column-wise: the same keys in each piece; join each part's columns
            keys, steps = pieces[0][1], pieces[0][3]
            assert all(np.array_equal(p[1], keys) and np.array_equal(p[3], steps) for p in pieces), name
            layouts = [optim.row_layout(rule, p[0][1] - p[0][0]) for p in pieces]
            rows = np.concatenate([np.concatenate([p[2][:, lay[part]] for p, lay in zip(pieces, layouts)], axis=1)
                                   for part in layouts[0]], axis=1)
            if isinstance(rule, optim.RowwiseAdagradRule):  # one accumulator per piece; keep each piece's
                rows = rows[:, :D + 1]
                per_row = {p[0]: p[2][:, -1] for p in pieces}
        out[name] = (keys, rows, steps, rule, per_row)
    return out


def load(c, model, n_saved):
    the_plan = plan(KINDS, c.world_size)
    distribute(model, c, the_plan)
    paths = [shard_path(PREFIX, r, n_saved) for r in range(n_saved)]
    load_sharded(model.embeddings, paths[::-1])  # any order
    want = whole_rows(paths)
    for name, shard in model.embeddings.shards.items():
        keys, rows, steps, rule, per_row = want[name]
        if per_row:  # row-wise Adagrad's accumulator comes from the old shard holding this shard's first column
            rows = rows.copy()
            rows[:, D] = next(acc for (a, b), acc in per_row.items() if a <= shard.cols[0] < b)
        if shard.kind == "row":
            keep = the_plan.owner_of(name, keys) == c.rank
            keys, rows, steps = keys[keep], rows[keep], steps[keep]
        a, b = shard.cols
        full = optim.row_layout(rule, D)
        rows = np.concatenate([rows[:, s.start + a:s.start + b] if s.stop - s.start == D else rows[:, s]
                               for s in full.values()], axis=1)  # this shard's columns of each part
        got = [np.concatenate(x) for x in zip(*shard.table.export())]
        order = np.argsort(got[0])
        where = f"rank {c.rank}: {name} ({shard.kind}, cols {shard.cols})"
        np.testing.assert_array_equal(got[0][order], keys, err_msg=where)
        np.testing.assert_array_equal(got[1][order], rows, err_msg=where)
        np.testing.assert_array_equal(got[2][order], steps, err_msg=where)
        assert keys.size > 0, where


def main():
    c = comm.init()
    model = dlrm()
    if MODE == "save":
        save(c, model)
    else:
        load(c, model, int(sys.argv[5]))
    print(f"rank {c.rank}: ok", flush=True)


main()
