"""Run by test_mpi.py under ``mpiexec -n W``: a DLRM sharded over W ranks, each on its 1/W of a global batch G,
trained with fp32 comms, against the same DLRM trained in this process on all of G.

argv: the placement kind of the first three tables (table, row or column; the fourth is data-parallel), a seed.
Checks every dense parameter, and every row (weights, optimizer state, step count) of every shard this rank
holds, plus eval-mode logits on unseen keys. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import batch, check_rows, configs, dlrm, plan
from gpuemb import comm, optim
from gpuemb.autograd import Tensor, bce_with_logits, no_grad
from gpuemb.distributed import distribute

KIND, SEED, G, STEPS = sys.argv[1], int(sys.argv[2]), 24, 4
TOL = 1e-5 if configs()[0].dtype == "float32" else 2e-3  # float16 rows: one rounding apart


def train(model, opt, dense, sparse, y, allreduce=None):
    opt.zero_grad()
    bce_with_logits(model(dense, sparse), Tensor(y)).backward()
    if allreduce:
        allreduce()
    opt.step()


def main():
    c = comm.init()
    W, r = c.world_size, c.rank
    b = G // W
    mine = slice(r * b, (r + 1) * b)
    the_plan = plan(KIND, W)
    ref, dist = dlrm(), dlrm()
    allreduce = distribute(dist, c, the_plan)
    opt_ref, opt_dist = optim.Adagrad(ref.parameters(), 0.05), optim.Adagrad(dist.parameters(), 0.05)
    for step in range(STEPS):
        dense, sparse, y = batch(SEED, step, G)
        train(ref, opt_ref, dense, sparse, y)
        train(dist, opt_dist, dense[mine], sparse[mine], y[mine], allreduce)
    sent = dist.embeddings.comm_bytes()
    assert W == 1 or sent["a2a_fwd"] > 0 and sent["a2a_bwd"] > 0, sent
    for (name, p), (_, q) in zip(ref.named_parameters(), dist.named_parameters()):
        np.testing.assert_allclose(q.data, p.data, rtol=1e-5, atol=1e-6, err_msg=f"rank {r}: dense {name}")
    check_rows({t.config.name: t for t in ref.embeddings.tables}, dist.embeddings.shards, the_plan, r, TOL)
    ref.eval(), dist.eval()
    dense, sparse, _ = batch(SEED, 99, G)
    sparse[:, 0] += 1000  # keys no table has seen: they read as their initial weights and are not inserted
    with no_grad():
        want, got = ref(dense, sparse).data[mine], dist(dense[mine], sparse[mine]).data
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"rank {r}: eval logits")
    assert all(len(s.table) == len(dist.embeddings.shards[n].table) for n, s in dist.embeddings.shards.items())
    print(f"rank {r}: ok", flush=True)


main()
