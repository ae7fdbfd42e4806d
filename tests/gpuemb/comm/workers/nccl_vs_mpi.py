"""Run by test_nccl_emulated.py under ``mpiexec -n W`` with GPUEMB_DEVICE=emulated: every collective of the nccl
backend, on device arrays, gives what the mpi backend gives on the same inputs as host arrays, and counts the same
bytes. Success prints "rank R: ok"; a failed check raises, which aborts the job.
"""
import sys

import numpy as np

from gpuemb import comm
from gpuemb.autograd.backend import is_device_array, to_device, to_host
from gpuemb.comm.base import REDUCE_DTYPES

SEED = int(sys.argv[1])


def same(mpi, nccl, collective, x, *args, **kwargs):
    """``collective`` on both backends; the nccl one returns device arrays."""
    want = getattr(mpi, collective)(x, *args, **kwargs)
    got = getattr(nccl, collective)(to_device(x), *args, **kwargs)
    for w, g in zip(*(r if isinstance(r, tuple) else (r,) for r in (want, got))):
        if not isinstance(g, np.ndarray):  # the counts of alltoallv stay on the host
            assert is_device_array(g), f"{collective} returned {type(g).__name__}, not a device array"
            g = to_host(g)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (collective, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w, err_msg=collective)
    assert nccl.reset_bytes() == mpi.reset_bytes(), collective


def check_alltoallv(mpi, nccl, rng):
    W = mpi.world_size
    counts = rng.integers(0, 4, W)
    counts[(mpi.rank + 1) % W] = 0  # an empty part to the next rank, and none to itself from rank 0
    counts[0] *= mpi.rank != 0
    n = int(counts.sum())
    same(mpi, nccl, "alltoallv", rng.standard_normal((n, 3, 2)).astype(np.float32), counts)
    same(mpi, nccl, "alltoallv", rng.integers(-2 ** 62, 2 ** 62, n), counts, tag="keys")
    same(mpi, nccl, "alltoallv", rng.integers(0, 256, (n, 5)).astype(np.uint8), counts, tag="wire")
    same(mpi, nccl, "alltoallv", np.zeros((0, 4), np.float16), np.zeros(W, np.int64))  # nothing at all


def check_allreduce(mpi, nccl, rng):
    for dtype in REDUCE_DTYPES:
        for op in comm.REDUCE_OPS:
            x = (rng.standard_normal((4, 3)) * 100).astype(dtype)
            same(mpi, nccl, "allreduce", x, op=op)


def check_reduce_scatter(mpi, nccl, rng):
    W = mpi.world_size
    for dtype in REDUCE_DTYPES:
        for op in comm.REDUCE_OPS:
            same(mpi, nccl, "reduce_scatter", (rng.standard_normal((3 * W, 2)) * 100).astype(dtype), op=op)


def check_allgather(mpi, nccl, rng):
    same(mpi, nccl, "allgather", rng.standard_normal((3, 2)).astype(np.float32))  # even: NCCL's allGather
    same(mpi, nccl, "allgather", rng.integers(-9, 9, (mpi.rank % 3, 4)).astype(np.int8))  # uneven, rank 0 empty
    same(mpi, nccl, "allgather", rng.random(5) < 0.5)


def check_broadcast(mpi, nccl, rng):
    for root in range(mpi.world_size):
        same(mpi, nccl, "broadcast", rng.standard_normal((2, 3, 4)), root=root)
    same(mpi, nccl, "broadcast", rng.integers(0, 2 ** 32, 6).astype(np.uint32), root=mpi.world_size - 1)


if __name__ == "__main__":
    mpi, nccl = comm.init("mpi"), comm.init("nccl")
    assert (mpi.name, nccl.name) == ("mpi", "nccl") and (nccl.rank, nccl.world_size) == (mpi.rank, mpi.world_size)
    rng = np.random.default_rng([SEED, mpi.rank])
    check_alltoallv(mpi, nccl, rng)
    check_allreduce(mpi, nccl, rng)
    check_reduce_scatter(mpi, nccl, rng)
    check_allgather(mpi, nccl, rng)
    check_broadcast(mpi, nccl, rng)
    nccl.barrier()
    nccl.close()
    print(f"rank {mpi.rank}: ok", flush=True)
