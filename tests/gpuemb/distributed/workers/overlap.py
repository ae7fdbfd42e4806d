"""Run by test_overlap.py under ``mpiexec -n W``: the dense gradients' allreduce in buckets during the backward
(``GradientAllreduce.ready`` on an ``OverlappedCommunicator``) against the blocking one, over MPI, on each rank's
own data: the same bits, the buckets started while the backward went on, all of them on the modelled link's
timeline. Prints "rank R: ok", with both runs' exposed communication.
"""
import sys

import numpy as np

from gpuemb import comm
from gpuemb.autograd import Tensor
from gpuemb.comm import ModelledCommunicator, OverlappedCommunicator
from gpuemb.comm.link import Link
from gpuemb.distributed.dense import GradientAllreduce

SEED = int(sys.argv[1])
WIDTHS = [16, 64, 64, 32, 32, 1]
LINK = Link("test", 2e-3, 1e9)  # 2 ms a message: long beside this tiny backward, so hiding it shows


def weights():
    rng = np.random.default_rng(SEED)  # the same on every rank, as after a broadcast
    return [Tensor((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), requires_grad=True)
            for a, b in zip(WIDTHS, WIDTHS[1:])]


def backward(ws, x, on_ready=None):
    h = x
    for w in ws[:-1]:
        h = (h @ w).relu()
    ((h @ ws[-1]) ** 2).mean().backward(on_ready=on_ready)


def main():
    world = comm.init("mpi")
    x = Tensor(np.random.default_rng([SEED, world.rank]).standard_normal((32, WIDTHS[0])).astype(np.float32))
    blocking, overlapped = weights(), weights()
    modelled = ModelledCommunicator(world, LINK)
    plain = GradientAllreduce(blocking, modelled, bucket_bytes=9000)
    modelled.reset_bytes()
    backward(blocking, x)
    plain()
    modelled.reset_bytes()
    (waited,) = modelled.timeline()

    over = OverlappedCommunicator(ModelledCommunicator(world, LINK))
    dense = GradientAllreduce(overlapped, over, bucket_bytes=9000)
    assert len(dense.buckets) >= 3, dense.buckets
    over.reset_bytes()
    started = []
    backward(overlapped, x, on_ready=lambda leaf: (dense.ready(leaf), started.append(len(dense._started))))
    dense()
    over.reset_bytes()
    (hidden,) = over.timeline()
    for a, b in zip(blocking, overlapped):
        assert np.array_equal(a.grad, b.grad), "the overlapped allreduce changed the bits"
    assert started[-2] >= 1 and started[-1] == len(dense.buckets), started
    assert len(hidden.spans) == len(waited.spans) == len(dense.buckets)
    # every span is on the timeline with the time its caller waited; how much the backward hid is a benchmark's
    # figure: on a busy machine the thread may get the interpreter only once the caller waits
    assert all(s.waited == s.issued for s in waited.spans)
    over.close()
    print(f"rank {world.rank}: ok (exposed {1e3 * hidden.exposed_comm_s:.1f} ms overlapped, "
          f"{1e3 * waited.exposed_comm_s:.1f} ms blocking)")


if __name__ == "__main__":
    main()
