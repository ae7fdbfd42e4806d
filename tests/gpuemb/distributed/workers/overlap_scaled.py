"""Run by test_overlap.py under ``mpiexec -n W``: fp16's loss-scaled step (``optimizer.scaled_step``) on a sharded
DLRM, trained a few steps through a ``Cluster`` on a blocking communicator, then on an ``OverlappedCommunicator``.
One step finds an inf in rank 1's row gradients only: every rank must skip that step, rows and dense layers alike.
Overlapped, the backward must have started the dense buckets before it ended (checked: at the last parameter's
hand-over, and all of them once it returned). Both runs must be the same bits: every loss, stepped flag, dense
parameter and row of this rank's shards, and the scale.

argv: the placement kind of the first three tables (table or row; the fourth is data-parallel), a seed.
Prints "rank R: ok".
"""
import sys

import numpy as np

from common import assert_same_bits, batch, dlrm, plan
from gpuemb import comm
from gpuemb.autograd import Tensor, bce_with_logits
from gpuemb.comm import OverlappedCommunicator
from gpuemb.distributed import distribute
from gpuemb.optim import SGD, LossScaler
from gpuemb.train import TrainConfig
from gpuemb.train.cluster import Cluster
from gpuemb.train.model import embedding_tables
from gpuemb.train.optimizer import scaled_step

KIND, SEED, G, STEPS, OVERFLOW = sys.argv[1], int(sys.argv[2]), 24, 4, 2


def train(c, overlap):
    W, r = c.world_size, c.rank
    b = G // W
    mine = slice(r * b, (r + 1) * b)
    model = dlrm()
    cluster = Cluster(c, TrainConfig.from_dict({}))
    assert cluster.overlapped == overlap
    # the sharding Cluster.shard does, on the workers' fixed plan
    cluster._dense = dense = distribute(model, c, plan(KIND, W))
    cluster.collections = [model.embeddings]
    tables, opt, scaler = embedding_tables(model), SGD(model.parameters(), 0.05), LossScaler(init_scale=2.0 ** 8)
    assert len(dense.buckets) > 1, dense.buckets
    handed = []  # at each parameter's hand-over in the backward: how many buckets had started

    def ready(leaf, ready=dense.ready):
        ready(leaf)
        handed.append(len(dense._started))
    dense.ready = ready  # what cluster.grad_ready hands the backward
    unscale, step = scaler.unscale_arrays_, [0]

    def unscale_arrays_(grads):
        grads = list(grads)
        if r == 1 and step[0] == OVERFLOW and grads and np.isfinite(grads[0]).all():
            grads[0].flat[0] = np.inf  # scaled_step's first check: the row gradients rank 1 holds
        return unscale(grads)
    scaler.unscale_arrays_ = unscale_arrays_
    losses, stepped, ends = [], [], []
    for step[0], (dense_x, sparse, y) in enumerate(tuple(a[mine] for a in batch(SEED, s, G)) for s in range(STEPS)):
        opt.zero_grad()
        handed.clear()
        loss = bce_with_logits(model(dense_x, sparse), Tensor(y))
        before = [p.data.copy() for p in model.parameters()]
        stepped.append(scaled_step(loss, opt, tables, scaler, cluster,
                                   after_backward=lambda: ends.append((list(handed), len(dense._started)))))
        cluster.settle()  # at the step's end, as the training loop does
        if not stepped[-1]:
            assert all(np.array_equal(a, p.data) for a, p in zip(before, model.parameters())), "a skipped step moved"
        losses.append(loss.data.copy())
    rows = {n: s.table.export() for n, s in model.embeddings.shards.items()}
    return losses, stepped, [p.data.copy() for p in model.parameters()], rows, (scaler.loss_scale, ends,
                                                                             len(dense.buckets))


def main():
    c = comm.init()
    blocking = train(c, overlap=False)
    over = OverlappedCommunicator(c)
    overlapped = train(over, overlap=True)
    n = len(dlrm().parameters())
    # every rank skipped the step whose rows overflowed on rank 1 alone, and only that one
    assert blocking[1] == overlapped[1] == [s != OVERFLOW for s in range(STEPS)], (blocking[1], overlapped[1])
    assert blocking[4][0] == overlapped[4][0] == 2.0 ** 7, (blocking[4][0], overlapped[4][0])
    # blocking: nothing started in the backward; overlapped: buckets had started before its last hand-over, and
    # all of them by its end
    assert all(len(h) == n and max(h) == 0 and done == 0 for h, done in blocking[4][1]), blocking[4][1]
    buckets = overlapped[4][2]
    assert all(len(h) == n and h[-2] >= 1 and h[-1] == done == buckets for h, done in overlapped[4][1]), \
        (buckets, overlapped[4][1])
    assert_same_bits(c.rank, (blocking[0], *blocking[2:4]), (overlapped[0], *overlapped[2:4]))
    over.drain()
    print(f"rank {c.rank}: ok", flush=True)


main()
