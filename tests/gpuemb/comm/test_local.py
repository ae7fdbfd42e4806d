"""The local backend, the checks every backend shares (arguments, and headers on which ranks must agree), and
``init``'s choice of backend and timeout."""
import numpy as np
import pytest

from gpuemb import comm
from gpuemb.autograd.backend import gpu_available, item, to_host
from gpuemb.comm import CommError, LocalCommunicator, check_agreement, header


def test_every_op_returns_a_fresh_copy_of_its_input(xp, rng):
    c = LocalCommunicator()
    x = xp.asarray(rng.standard_normal((5, 3)).astype(np.float32))
    recv, recv_counts = c.alltoallv(x, [5])
    assert type(recv) is type(x) and recv.dtype == x.dtype
    np.testing.assert_array_equal(recv_counts, [5])
    outs = [recv, c.allreduce(x), c.allreduce(x, op="max"), c.reduce_scatter(x), c.allgather(x),
            c.broadcast(x, root=0)]
    for out in outs:
        np.testing.assert_array_equal(to_host(out), to_host(x))
        out[0, 0] += 1  # a copy: changing it leaves the input alone
    assert all(item(out[0, 0]) == np.float32(item(x[0, 0]) + 1) for out in outs)  # x + 1 rounded as float32
    c.barrier()


def test_alltoallv_of_keys_with_an_empty_send(rng):
    c = LocalCommunicator()
    keys = rng.integers(-2 ** 62, 2 ** 62, 7)
    np.testing.assert_array_equal(c.alltoallv(keys, np.array([7], np.int32))[0], keys)
    empty, counts = c.alltoallv(keys[:0], [0])
    assert empty.shape == (0,) and counts.tolist() == [0]


def test_nothing_leaves_a_single_rank_and_reset_bytes_starts_over(rng):
    c = LocalCommunicator()
    x = rng.standard_normal((4, 2))
    c.alltoallv(x, [4], tag="a2a_fwd")
    c.allreduce(x)
    c.broadcast(x)
    assert c.reset_bytes() == {"a2a_fwd": 0, "allreduce": 0, "broadcast": 0}
    assert c.reset_bytes() == {}


@pytest.mark.parametrize("call,message", [
    (lambda c, x: c.alltoallv(x, [2, 2]), "send_counts=[2, 2]; pass 1 non-negative ints"),
    (lambda c, x: c.alltoallv(x, [-4]), "send_counts=[-4]"),
    (lambda c, x: c.alltoallv(x, [4.0]), "send_counts=[4.0]"),
    (lambda c, x: c.alltoallv(x, [3]), "send_counts add up to 3 rows but send has shape (4, 2)"),
    (lambda c, x: c.alltoallv(x[0, 0], [1]), "got float64 of shape (); pass a 1- to 4-D array"),
    (lambda c, x: c.allgather(x.reshape(1, 1, 1, 4, 2)), "got float64 of shape (1, 1, 1, 4, 2)"),
    (lambda c, x: c.allreduce(x.astype(np.complex64)), "got complex64 of shape (4, 2)"),
    (lambda c, x: c.allreduce(x.astype(np.float16)), "float16 (4, 2) cannot be reduced"),
    (lambda c, x: c.allreduce(x, op="mean"), "op='mean'; use one of sum, max, min"),
    (lambda c, x: c.reduce_scatter(x, op="avg"), "op='avg'; use one of sum, max, min"),
    (lambda c, x: c.reduce_scatter(x[0, 0]), "got float64 of shape (); pass a 1- to 4-D array"),
    (lambda c, x: c.reduce_scatter(x.astype(np.uint8)), "uint8 (4, 2) cannot be reduced"),
    (lambda c, x: c.broadcast(x, root=1), "root=1; use a rank in [0, 1)"),
    (lambda c, x: c.allgather(x.tolist()), "wants a NumPy or CuPy array, got list"),
])
def test_bad_arguments_name_the_op_the_rank_and_the_shape(call, message, rng):
    with pytest.raises(CommError, match="on rank 0 of 1") as e:
        call(LocalCommunicator(), rng.standard_normal((4, 2)))
    assert message in str(e.value)


def _table(*headers):
    return np.stack(headers)


def test_ranks_may_differ_in_rows_for_alltoallv_and_allgather_only(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    check_agreement(_table(header("alltoallv", a, 2, counts=[1, 2]), header("alltoallv", b, 2, counts=[5, 0])), 1)
    check_agreement(_table(header("allgather", a, 2), header("allgather", b, 2)), 0)
    with pytest.raises(CommError) as e:
        check_agreement(_table(header("allreduce", a, 2), header("allreduce", b, 2)), 1)
    assert str(e.value).startswith("rank 1 of 2: ranks disagree")
    assert "rank 0 called allreduce(float64 [3, 4]) op='sum', rank 1 called allreduce(float64 [5, 4]) op='sum'" \
        in str(e.value)


@pytest.mark.parametrize("mine,theirs,message", [
    (("allreduce", (3,), "float32", 0), ("allgather", (3,), "float32", 0), "called allgather(float32 [3])"),
    (("allreduce", (3,), "float32", 0), ("allreduce", (3,), "float32", 1), "op='max'"),
    (("broadcast", (3,), "float32", 0), ("broadcast", (3,), "float32", 1), "root=1"),
    (("alltoallv", (3, 4), "float32", 0), ("alltoallv", (3, 5), "float32", 0), "float32 [3, 5]"),
    (("alltoallv", (3, 4), "float32", 0), ("alltoallv", (3, 4), "float16", 0), "float16 [3, 4]"),
    (("barrier", None, None, 0), ("alltoallv", (2,), "int64", 0), "called alltoallv(int64 [2])"),
])
def test_disagreeing_ranks_are_named_with_their_calls(mine, theirs, message):
    def h(op, shape, dtype, extra):
        return header(op, None if shape is None else np.zeros(shape, dtype), 2, extra=extra)
    with pytest.raises(CommError, match="same collectives in the same order") as e:
        check_agreement(_table(h(*mine), h(*theirs)), 0)
    assert message in str(e.value)


def test_init_is_local_in_a_plain_process(plain_process):
    c = comm.init()
    assert isinstance(c, LocalCommunicator) and (c.rank, c.world_size, c.timeout_s) == (0, 1, 300.0)
    assert comm.init("local", timeout_s=2).timeout_s == 2.0


@pytest.mark.parametrize("name", comm.SIZE_ENV)
def test_the_launcher_environment_gives_the_world_size(plain_process, monkeypatch, name):
    monkeypatch.setenv(name, "3")
    assert comm.launched_world_size() == 3
    with pytest.raises(CommError, match="backend='local' in a job of 3 ranks"):
        comm.init("local")


def test_init_refuses_unknown_backends_and_nccl_without_a_gpu(plain_process):
    with pytest.raises(ValueError, match="backend='gloo'; use one of auto, local, mpi, nccl"):
        comm.init("gloo")
    if not gpu_available():
        with pytest.raises(CommError, match="backend='nccl' needs a GPU"):
            comm.init("nccl")


def test_timeout_comes_from_the_argument_then_the_environment(plain_process, monkeypatch):
    monkeypatch.setenv(comm.TIMEOUT_ENV, "7.5")
    assert comm.init().timeout_s == 7.5
    assert comm.init(timeout_s=1).timeout_s == 1.0
    monkeypatch.setenv(comm.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="GPUEMB_COMM_TIMEOUT='soon' is not a number of seconds"):
        comm.init()
    for bad in (0, -1, float("inf"), "5"):
        with pytest.raises(ValueError, match="timeout_s="):
            comm.resolve_timeout(bad)
