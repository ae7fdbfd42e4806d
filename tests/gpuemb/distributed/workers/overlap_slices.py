"""Run by test_overlap.py under ``mpiexec -n W``: ``--deterministic``'s slices (``train/slices.py``) of a small
DLRM's head, N micro-slices of which each of W ranks trains N/W, their dense gradients gathered in buckets
(``SliceGradients``) on a blocking communicator, then on an ``OverlappedCommunicator``, where the last slice's
backward starts each bucket's gather once its gradients are complete. Both must be the bits of one process that
trains the N slices (the loss and every dense gradient); overlapped, the loss sums' gather must have started first,
then the buckets' gathers, before the last slice's backward ended (at its last parameter's hand-over), and all of
them by the time the slices returned.

argv: a seed. Prints "rank R: ok".
"""
import sys
from types import SimpleNamespace

import numpy as np

from common import batch, dlrm
from gpuemb import comm
from gpuemb.comm import LocalCommunicator, OverlappedCommunicator
from gpuemb.distributed.dense import SliceGradients
from gpuemb.train.slices import Slices

SEED, N, G = int(sys.argv[1]), 4, 32


def sliced(c):
    """This rank's slices on ``c``: the step's loss, the summed dense gradients, at each parameter's hand-over in
    the last slice's backward how many gathers had started, how many had once the slices returned, the tags of
    the collectives started (overlapped) and the number of buckets."""
    W, r = c.world_size, c.rank
    part = slice(r * G // W, (r + 1) * G // W)
    dense, sparse, y = (a[part] for a in batch(SEED, 0, G))
    model = dlrm()
    embedded = model.embed(sparse)  # lookups of local tables: a key's row is the same on every rank
    gather = SliceGradients(model.parameters(), c)
    handed, started = [], []

    def ready(leaf, ready=gather.ready):
        ready(leaf)
        handed.append(len(gather._started))
    gather.ready = ready
    if hasattr(c, "start"):
        _start = c.start
        c.start = lambda op, *args, **kwargs: started.append(kwargs.get("tag", op)) or _start(op, *args, **kwargs)
    slices = Slices(N, G, c, gather)
    sums, _ = slices.backward(model, SimpleNamespace(dense=dense, label=y), embedded, lambda logits, labels: labels)
    at_end = len(gather._started)
    loss = slices.loss(sums)
    gather()
    return loss, [p.grad for p in model.parameters()], (handed, at_end, started, len(gather.buckets))


def main():
    world = comm.init("mpi")
    one, want, _ = sliced(LocalCommunicator())  # one process, every slice
    blocking, b_grads, (b_handed, b_end, _, b_buckets) = sliced(world)
    over = OverlappedCommunicator(world)
    overlapped, o_grads, (o_handed, o_end, tags, buckets) = sliced(over)
    n = len(want) + 1  # hand-overs: the dense parameters and the slice's embeddings
    assert one == blocking == overlapped, (one, blocking, overlapped)
    for w, b, o in zip(want, b_grads, o_grads):
        assert np.array_equal(w, b), f"rank {world.rank}: the blocking gather moved a bit"
        assert np.array_equal(w, o), f"rank {world.rank}: the overlapped gather moved a bit"
    assert buckets > 1 and b_buckets == 1, (buckets, b_buckets)  # blocking: one gather, one latency
    assert len(b_handed) == n and not any(b_handed) and b_end == 0, (b_handed, b_end)  # blocking: all in the call
    assert len(o_handed) == n and o_handed[-2] >= 1 and o_handed[-1] == o_end == buckets, (o_handed, o_end)
    assert tags == ["loss"] + ["allreduce"] * buckets, tags
    over.close()
    print(f"rank {world.rank}: ok", flush=True)


if __name__ == "__main__":
    main()
