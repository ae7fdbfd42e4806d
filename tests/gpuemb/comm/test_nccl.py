"""The NCCL backend on one GPU with world size 1: alltoallv (grouped send/recv to itself), allreduce, allgather and
broadcast give back the input, on the device, and an int8 all-to-all stays within its bound. Without NCCL, the
backend is a one-line CommError saying what to do. (Several ranks: test_nccl_emulated.py.)"""
import types

import numpy as np
import pytest

from gpuemb import comm
from gpuemb.autograd import backend
from gpuemb.autograd.backend import is_device_array, synchronize, to_device, to_host
from gpuemb.comm import CommError, LocalCommunicator
from gpuemb.comm.nccl import NcclCommunicator


@pytest.fixture
def nccl_comm(plain_process):
    c = comm.init("nccl", timeout_s=60)
    yield c
    c.close()


def _no_binding(name):
    raise ImportError("libnccl.so.2: cannot open shared object file: No such file or directory")


NO_NCCL = [
    (_no_binding, "backend='nccl': CuPy's NCCL binding does not import (libnccl.so.2: cannot open shared object file: "
                  "No such file or directory); install the gpu or gpu-cu13 extra, or use backend='mpi'"),
    (lambda name: types.SimpleNamespace(available=False),
     "backend='nccl': CuPy found no libnccl; install the gpu or gpu-cu13 extra, which brings NCCL, or use "
     "backend='mpi'"),
]


@pytest.mark.parametrize("library,message", NO_NCCL)
def test_without_nccl_the_backend_is_a_comm_error_saying_what_to_do(monkeypatch, library, message):
    monkeypatch.setattr(backend, "library", library)  # what CuPy's binding looks like without libnccl
    with pytest.raises(CommError) as e:
        NcclCommunicator(LocalCommunicator())
    assert str(e.value) == message


@pytest.mark.gpu
@pytest.mark.parametrize("library,message", NO_NCCL)
def test_init_without_nccl_is_the_same_comm_error(plain_process, monkeypatch, library, message):
    monkeypatch.setattr(backend, "library", library)
    with pytest.raises(CommError) as e:
        comm.init("nccl", timeout_s=60)
    assert str(e.value) == message


@pytest.mark.gpu
def test_a_world_of_one_gives_back_its_input(nccl_comm, rng):
    x = rng.standard_normal((9, 5)).astype(np.float32)
    d = to_device(x)
    recv, counts = nccl_comm.alltoallv(d, [9])
    assert counts.tolist() == [9] and is_device_array(recv)
    for out in (recv, nccl_comm.allreduce(d), nccl_comm.allreduce(d, op="max"), nccl_comm.reduce_scatter(d),
                nccl_comm.allgather(d), nccl_comm.broadcast(d, root=0)):
        np.testing.assert_array_equal(to_host(out), x)
    keys = rng.integers(-2 ** 62, 2 ** 62, 11)
    np.testing.assert_array_equal(to_host(nccl_comm.alltoallv(to_device(keys), [11])[0]), keys)
    synchronize()
    assert nccl_comm.reset_bytes() == {"alltoallv": 0, "allreduce": 0, "reduce_scatter": 0, "allgather": 0,
                                       "broadcast": 0}


@pytest.mark.gpu
def test_host_arrays_come_back_on_the_host(nccl_comm, rng):
    x = rng.standard_normal(6)
    out = nccl_comm.allreduce(x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x)


@pytest.mark.gpu
def test_int8_alltoallv_on_the_device_stays_within_its_bound(nccl_comm, rng):
    x = (rng.standard_normal((64, 32)) * 10.0 ** rng.uniform(-2, 2, (64, 1))).astype(np.float32)
    got, _ = comm.alltoallv_encoded(nccl_comm, to_device(x), [64], "int8")
    err = np.abs(to_host(got) - x)
    assert np.all(err <= np.abs(x).max(axis=1, keepdims=True) / 254 * (1 + 1e-5)) and err.max() > 0
