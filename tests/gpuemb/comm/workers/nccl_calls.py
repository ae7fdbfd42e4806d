"""Run by test_nccl_emulated.py under ``mpiexec -n W`` with GPUEMB_DEVICE=emulated: CuPy's NCCL binding, as the
backend gives it, called the way CuPy's users call it (device pointers, counts, NCCL_* types), against NumPy.

Each rank's data comes from a generator seeded by (seed, rank, what), so every rank rebuilds all ranks' inputs and
computes the expected result itself. A failed check raises; success prints "rank R: ok".
"""
import sys

import numpy as np
from mpi4py import MPI

from gpuemb.autograd import backend
from gpuemb.autograd.backend import to_device, to_host

nccl, xp = backend.library("nccl"), backend.xp
SEED = int(sys.argv[1])
WORLD = MPI.COMM_WORLD
W, R = WORLD.Get_size(), WORLD.Get_rank()
STREAM = backend.current_stream().ptr
TYPES = {nccl.NCCL_INT8: np.int8, nccl.NCCL_UINT8: np.uint8, nccl.NCCL_INT32: np.int32, nccl.NCCL_UINT32: np.uint32,
         nccl.NCCL_INT64: np.int64, nccl.NCCL_UINT64: np.uint64, nccl.NCCL_FLOAT16: np.float16,
         nccl.NCCL_FLOAT32: np.float32, nccl.NCCL_FLOAT64: np.float64}


def data(rank, what, dtype, n):
    """Rank ``rank``'s ``n`` values for check ``what``: small integers (so products of 3 fit in int8), or floats."""
    rng = np.random.default_rng([SEED, rank, *what])
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-2, 2, n).astype(dtype)
    low = 0 if np.dtype(dtype).kind == "u" else -5
    return rng.integers(low, 6, n).astype(dtype)


def all_ranks(what, dtype, n):
    return np.stack([data(r, what, dtype, n) for r in range(W)])


def reference(op, parts):
    """NCCL's reduction ``op`` over ranks, from NumPy's functions (avg of integers: the sum, truncated toward 0)."""
    if op == nccl.NCCL_AVG:
        mean = parts.astype(np.float64).sum(axis=0) / W
        return mean.astype(parts.dtype) if parts.dtype.kind == "f" else np.trunc(mean).astype(parts.dtype)
    return {nccl.NCCL_SUM: np.sum, nccl.NCCL_PROD: np.prod, nccl.NCCL_MAX: np.max,
            nccl.NCCL_MIN: np.min}[op](parts, axis=0).astype(parts.dtype)


def check_all_reduce(c):
    for datatype, dtype in TYPES.items():
        for op in (nccl.NCCL_SUM, nccl.NCCL_PROD, nccl.NCCL_MAX, nccl.NCCL_MIN, nccl.NCCL_AVG):
            parts = all_ranks((1, datatype, op), dtype, 13)
            send, recv = to_device(parts[R]), xp.zeros(13, dtype)
            c.allReduce(send.data.ptr, recv.data.ptr, 13, datatype, op, STREAM)
            rtol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}.get(dtype, 0)
            np.testing.assert_allclose(to_host(recv), reference(op, parts), rtol=rtol, atol=rtol,
                                       err_msg=f"allReduce {np.dtype(dtype)} op {op}")
            np.testing.assert_array_equal(to_host(send), parts[R])  # the input is left alone
    parts = all_ranks((2,), np.float64, 7)
    x = to_device(parts[R])
    c.allReduce(x.data.ptr, x.data.ptr, 7, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, STREAM)  # in place
    np.testing.assert_allclose(to_host(x), parts.sum(axis=0), rtol=1e-12)
    nans = all_ranks((3,), np.float32, 5)
    nans[0, :2] = np.nan
    for op, fn in ((nccl.NCCL_MAX, np.fmax), (nccl.NCCL_MIN, np.fmin)):  # NCCL's fmaxf and fminf skip NaN
        x = to_device(nans[R])
        c.allReduce(x.data.ptr, x.data.ptr, 5, nccl.NCCL_FLOAT32, op, STREAM)
        np.testing.assert_array_equal(to_host(x), fn.reduce(nans, axis=0))


def check_reduce_scatter(c):
    for datatype, dtype in TYPES.items():
        for op in (nccl.NCCL_SUM, nccl.NCCL_MAX, nccl.NCCL_AVG):
            parts = all_ranks((6, datatype, op), dtype, 4 * W)
            send, recv = to_device(parts[R]), xp.zeros(4, dtype)
            c.reduceScatter(send.data.ptr, recv.data.ptr, 4, datatype, op, STREAM)
            rtol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}.get(dtype, 0)
            np.testing.assert_allclose(to_host(recv), reference(op, parts)[4 * R:4 * R + 4], rtol=rtol, atol=rtol,
                                       err_msg=f"reduceScatter {np.dtype(dtype)} op {op}")
    parts = all_ranks((7,), np.float64, 3 * W)
    x = to_device(parts[R])
    mine = x[3 * R:]  # in place: the output is this rank's block of the input
    c.reduceScatter(x.data.ptr, mine.data.ptr, 3, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, STREAM)
    np.testing.assert_allclose(to_host(x[3 * R:3 * R + 3]), parts.sum(axis=0)[3 * R:3 * R + 3], rtol=1e-12)


def check_all_gather(c):
    parts = all_ranks((4,), np.int64, 6)
    out = xp.zeros(6 * W, np.int64)
    c.allGather(to_device(parts[R]).data.ptr, out.data.ptr, 6, nccl.NCCL_INT64, STREAM)
    np.testing.assert_array_equal(to_host(out), parts.reshape(-1))
    halves = all_ranks((5,), np.float16, 3)
    out = xp.zeros(3 * W, np.float16)
    out[3 * R:3 * R + 3] = to_device(halves[R])
    mine = out[3 * R:]  # in place: this rank's part already sits at its slot of the output
    c.allGather(mine.data.ptr, out.data.ptr, 3, nccl.NCCL_FLOAT16, STREAM)
    np.testing.assert_array_equal(to_host(out), halves.reshape(-1))


def check_broadcast(c):
    for root in range(W):
        parts = all_ranks((6, root), np.float32, 9)
        send, recv = to_device(parts[R]), xp.zeros(9, np.float32)
        c.broadcast(send.data.ptr, recv.data.ptr, 9, nccl.NCCL_FLOAT32, root, STREAM)
        np.testing.assert_array_equal(to_host(recv), parts[root])
        np.testing.assert_array_equal(to_host(send), parts[R])
        c.broadcast(send.data.ptr, send.data.ptr, 9, nccl.NCCL_FLOAT32, root, STREAM)  # in place
        np.testing.assert_array_equal(to_host(send), parts[root])


def sizes(src, dst):
    """Elements of the two messages ``src`` sends ``dst`` in one group: 0 to 4 each, so some are empty."""
    return np.random.default_rng([SEED, src, dst, 7]).integers(0, 5, 2).tolist()


def check_grouped_send_and_recv(c):
    """An all-to-all with two messages to every peer, itself included, in one group: messages to the same peer
    arrive in the order sent."""
    outgoing = {dst: [data(R, (8, dst, k), np.float32, n) for k, n in enumerate(sizes(R, dst))] for dst in range(W)}
    sends = {dst: [to_device(m) for m in msgs] for dst, msgs in outgoing.items()}
    recvs = {src: [xp.zeros(n, np.float32) for n in sizes(src, R)] for src in range(W)}
    nccl.groupStart()
    for src in reversed(range(W)):  # recvs posted before the sends, in another order than the peers': no deadlock
        for buf in recvs[src]:
            c.recv(buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, src, STREAM)
    for dst in range(W):
        for buf in sends[dst]:
            c.send(buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, dst, STREAM)
    nccl.groupEnd()
    for src in range(W):
        for k, buf in enumerate(recvs[src]):
            np.testing.assert_array_equal(to_host(buf), data(src, (8, R, k), np.float32, buf.size))


def check_ungrouped_ring(c):
    """A send and a recv outside any group each run alone: even ranks send first, odd ranks receive first."""
    mine, got = to_device(data(R, (9,), np.int32, 4)), xp.zeros(4, np.int32)
    steps = [lambda: c.send(mine.data.ptr, 4, nccl.NCCL_INT32, (R + 1) % W, STREAM),
             lambda: c.recv(got.data.ptr, 4, nccl.NCCL_INT32, (R - 1) % W, STREAM)]
    for step in steps if R % 2 == 0 else steps[::-1]:
        step()
    np.testing.assert_array_equal(to_host(got), data((R - 1) % W, (9,), np.int32, 4))


def expect_error(call, *fragments):
    try:
        call()
    except (nccl.NcclError, ValueError) as e:
        assert all(f in str(e) for f in fragments), str(e)
    else:
        raise AssertionError(f"no error; expected one saying {fragments}")


def check_mismatches_are_errors(c):
    """A recv of another size than its send, and a communicator made with ranks or ids that do not fit MPI's, are
    errors (the same on every rank where every rank can know)."""
    buf = xp.zeros(4, np.float64)
    if R == 1:
        expect_error(lambda: c.recv(buf.data.ptr, 2, nccl.NCCL_FLOAT64, 0, STREAM), "more bytes than it was posted")
        expect_error(lambda: c.recv(buf.data.ptr, 4, nccl.NCCL_FLOAT64, 0, STREAM), "recv of 32 bytes from rank 0 "
                     "got 16", "same count and datatype")
    elif R == 0:
        c.send(buf.data.ptr, 4, nccl.NCCL_FLOAT64, 1, STREAM)
        c.send(buf.data.ptr, 2, nccl.NCCL_FLOAT64, 1, STREAM)
    uid = WORLD.bcast(nccl.get_unique_id() if R == 0 else None)
    expect_error(lambda: nccl.NcclCommunicator(W + 1, uid, R), f"MPI rank 0 of {W} made NcclCommunicator(ndev={W + 1}, "
                 f"rank=0)", "mpiexec -n ndev")
    expect_error(lambda: nccl.NcclCommunicator(W, nccl.get_unique_id(), R), "rank 1 passed a commId other than "
                 "rank 0's")


if __name__ == "__main__":
    assert nccl.available and W > 1
    c = nccl.NcclCommunicator(W, WORLD.bcast(nccl.get_unique_id() if R == 0 else None), R)
    check_all_reduce(c)
    check_reduce_scatter(c)
    check_all_gather(c)
    check_broadcast(c)
    check_grouped_send_and_recv(c)
    check_ungrouped_ring(c)
    check_mismatches_are_errors(c)
    c.check_async_error()
    c.destroy()
    expect_error(c.check_async_error, "destroyed")
    print(f"rank {R}: ok", flush=True)
