"""The NCCL backend on one GPU with world size 1: alltoallv (grouped send/recv to itself), allreduce, allgather and
broadcast give back the input, on the device, and an int8 all-to-all stays within its bound."""
import numpy as np
import pytest

from gpuemb import comm
from gpuemb.autograd.backend import is_device_array, synchronize, to_device, to_host

pytestmark = pytest.mark.gpu


@pytest.fixture
def nccl_comm(monkeypatch):
    for name in comm.SIZE_ENV + comm.RANK_ENV:
        monkeypatch.delenv(name, raising=False)
    c = comm.init("nccl", timeout_s=60)
    yield c
    c.close()


def test_a_world_of_one_gives_back_its_input(nccl_comm, rng):
    x = rng.standard_normal((9, 5)).astype(np.float32)
    d = to_device(x)
    recv, counts = nccl_comm.alltoallv(d, [9])
    assert counts.tolist() == [9] and is_device_array(recv)
    for out in (recv, nccl_comm.allreduce(d), nccl_comm.allreduce(d, op="max"), nccl_comm.allgather(d),
                nccl_comm.broadcast(d, root=0)):
        np.testing.assert_array_equal(to_host(out), x)
    keys = rng.integers(-2 ** 62, 2 ** 62, 11)
    np.testing.assert_array_equal(to_host(nccl_comm.alltoallv(to_device(keys), [11])[0]), keys)
    synchronize()
    assert nccl_comm.reset_bytes() == {"alltoallv": 0, "allreduce": 0, "allgather": 0, "broadcast": 0}


def test_host_arrays_come_back_on_the_host(nccl_comm, rng):
    x = rng.standard_normal(6)
    out = nccl_comm.allreduce(x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x)


def test_int8_alltoallv_on_the_device_stays_within_its_bound(nccl_comm, rng):
    x = (rng.standard_normal((64, 32)) * 10.0 ** rng.uniform(-2, 2, (64, 1))).astype(np.float32)
    got, _ = comm.alltoallv_encoded(nccl_comm, to_device(x), [64], "int8")
    err = np.abs(to_host(got) - x)
    assert np.all(err <= np.abs(x).max(axis=1, keepdims=True) / 254 * (1 + 1e-5)) and err.max() > 0
