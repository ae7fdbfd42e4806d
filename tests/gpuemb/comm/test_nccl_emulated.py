"""The emulated device's NCCL (CuPy's binding, over MPI): on several ranks, the binding against NumPy and the nccl
backend against NumPy and against the mpi backend on the same inputs, each rank with ``GPUEMB_DEVICE=emulated``
whatever this process runs on; in this process, a world of one and the errors for what NCCL would get wrong."""
import re

import numpy as np
import pytest

from gpuemb.autograd.emulated import nccl

EMULATED = {"GPUEMB_DEVICE": "emulated"}


def every_rank_ok(rc, output, n):
    assert rc == 0, output
    # every rank reports; mpiexec may splice the lines of different ranks together
    assert sorted(map(int, re.findall(r"rank (\d+): ok", output))) == list(range(n)), output


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_the_binding_matches_numpy_on_every_rank(n, rng, mpiexec):
    rc, output = mpiexec(n, "nccl_calls.py", rng.integers(1 << 30), **EMULATED)
    every_rank_ok(rc, output, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_of_the_backend_matches_numpy(n, rng, mpiexec):
    rc, output = mpiexec(n, "collectives.py", rng.integers(1 << 30), "nccl", **EMULATED)
    every_rank_ok(rc, output, n)


@pytest.mark.slow
def test_every_collective_gives_what_the_mpi_backend_gives(rng, mpiexec):
    rc, output = mpiexec(2, "nccl_vs_mpi.py", rng.integers(1 << 30), **EMULATED)
    every_rank_ok(rc, output, 2)


# In this process the memory behind the pointers is NumPy's: the emulated NCCL reads and writes any address.
@pytest.fixture
def alone():
    c = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    yield c
    c.destroy()


def test_a_world_of_one_gives_back_its_input_without_mpi(alone, rng):
    x = rng.standard_normal(7)
    for op in (nccl.NCCL_SUM, nccl.NCCL_PROD, nccl.NCCL_MAX, nccl.NCCL_MIN, nccl.NCCL_AVG):
        out = np.zeros_like(x)
        alone.allReduce(x.ctypes.data, out.ctypes.data, 7, nccl.NCCL_FLOAT64, op, 0)
        np.testing.assert_array_equal(out, x)
    for call in (lambda out: alone.allGather(x.ctypes.data, out.ctypes.data, 7, nccl.NCCL_FLOAT64, 0),
                 lambda out: alone.broadcast(x.ctypes.data, out.ctypes.data, 7, nccl.NCCL_FLOAT64, 0, 0)):
        out = np.zeros_like(x)
        call(out)
        np.testing.assert_array_equal(out, x)
    parts, out = rng.integers(0, 256, 10).astype(np.uint8), np.zeros(10, np.uint8)
    nccl.groupStart()
    alone.recv(out.ctypes.data, 6, nccl.NCCL_UINT8, 0, 0)
    alone.recv(out[6:].ctypes.data, 4, nccl.NCCL_UINT8, 0, 0)
    alone.send(parts.ctypes.data, 6, nccl.NCCL_UINT8, 0, 0)
    alone.send(parts[6:].ctypes.data, 4, nccl.NCCL_UINT8, 0, 0)
    nccl.groupEnd()
    np.testing.assert_array_equal(out, parts)  # sends to oneself meet the recvs in order


def _in_a_group(call):
    def run(c, x, y):
        nccl.groupStart()
        try:
            call(c, x, y)
        finally:
            nccl.groupEnd()
    return run


F64 = nccl.NCCL_FLOAT64


@pytest.mark.parametrize("call,error,message", [
    (lambda c, x, y: c.allReduce(x.ctypes.data, y.ctypes.data, 4, 42, nccl.NCCL_SUM, 0), nccl.NcclError,
     "NCCL_ERROR_INVALID_ARGUMENT: allReduce on rank 0 of 1: datatype=42"),
    (lambda c, x, y: c.allReduce(x.ctypes.data, y.ctypes.data, 4, F64, 7, 0), nccl.NcclError, "op=7; pass NCCL_SUM"),
    (lambda c, x, y: c.allReduce(x.ctypes.data, y.ctypes.data, 4, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM, 0),
     nccl.NcclError, "moves bfloat16 but cannot reduce it"),
    (lambda c, x, y: c.allReduce(x.ctypes.data, x.ctypes.data + 8, 3, F64, nccl.NCCL_SUM, 0), nccl.NcclError,
     "sendbuf and recvbuf overlap; NCCL works in place only with sendbuf == recvbuf"),
    (lambda c, x, y: c.allGather(x.ctypes.data + 8, x.ctypes.data, 3, F64, 0), nccl.NcclError,
     "in place only with sendbuf == recvbuf + rank * count * itemsize"),
    (lambda c, x, y: c.broadcast(x.ctypes.data, y.ctypes.data, 4, F64, 1, 0), nccl.NcclError,
     "root=1; pass a rank in [0, 1)"),
    (lambda c, x, y: c.send(x.ctypes.data, 4, F64, 0, 0), nccl.NcclError,
     "a group sends [32] bytes to itself and receives []; NCCL would hang"),
    (_in_a_group(lambda c, x, y: (c.send(x.ctypes.data, 4, F64, 0, 0), c.recv(y.ctypes.data, 3, F64, 0, 0))),
     nccl.NcclError, "sends [32] bytes to itself and receives [24]"),
    (lambda c, x, y: c.recv(y.ctypes.data, 4, F64, 1, 0), nccl.NcclError, "recv on rank 0 of 1: peer=1"),
    (_in_a_group(lambda c, x, y: c.allGather(x.ctypes.data, y.ctypes.data, 4, F64, 0)), nccl.NcclError,
     "NCCL_ERROR_INVALID_USAGE: allGather on rank 0 of 1 inside groupStart/groupEnd"),
    (lambda c, x, y: nccl.groupEnd(), nccl.NcclError, "NCCL_ERROR_INVALID_USAGE: groupEnd without a groupStart"),
    (lambda c, x, y: c.allReduce(x, y, 4, F64, nccl.NCCL_SUM, 0), TypeError,
     "allReduce on rank 0 of 1: sendbuf must be an int (a pointer is array.data.ptr"),
    (lambda c, x, y: c.broadcast(0, y.ctypes.data, 4, F64, 0, 0), nccl.NcclError, "a null pointer for 32 bytes"),
    (lambda c, x, y: c.allGather(x.ctypes.data, y.ctypes.data, -1, F64, 0), OverflowError, "count=-1"),
    (lambda c, x, y: nccl.NcclCommunicator(1, tuple(nccl.get_unique_id()), 0), TypeError,
     "commId must be the bytes of get_unique_id(), got tuple"),
    (lambda c, x, y: nccl.NcclCommunicator(1, b"1234", 0), ValueError, "commId length 4 != 128."),
    (lambda c, x, y: nccl.NcclCommunicator(2, nccl.get_unique_id(), 2), nccl.NcclError, "rank=2 of ndev=2"),
])
def test_what_nccl_would_get_wrong_is_an_error_saying_what_to_do(alone, rng, call, error, message):
    x, y = rng.standard_normal(4), np.zeros(4)
    with pytest.raises(error) as e:
        call(alone, x, y)
    assert message in str(e.value) and "\n" not in str(e.value)
    np.testing.assert_array_equal(y, 0)  # nothing was written
    assert alone.check_async_error() is None  # and the communicator still works


def test_a_destroyed_or_aborted_communicator_refuses_every_call(rng):
    x = rng.standard_normal(3)
    for end in ("destroy", "abort"):
        c = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
        getattr(c, end)()
        c.destroy()  # a second end is harmless, as in CuPy
        with pytest.raises(nccl.NcclError, match="the communicator was destroyed or aborted") as e:
            c.allReduce(x.ctypes.data, x.ctypes.data, 3, F64, nccl.NCCL_SUM, 0)
        assert e.value.status == 4
        with pytest.raises(nccl.NcclError, match="check_async_error"):
            c.check_async_error()
