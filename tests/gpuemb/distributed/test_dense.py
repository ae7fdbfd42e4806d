"""Data-parallel dense gradients in a world of one: the buckets, the values (a mean over one rank is the gradient
itself), and parameters without a gradient. The mpiexec tests check the mean over several ranks."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.comm import LocalCommunicator
from gpuemb.distributed import GradientAllreduce, broadcast_parameters
from gpuemb.distributed.dense import SliceGradients


class CountingComm(LocalCommunicator):
    """A world of one that records the size of each allreduce."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def allreduce(self, x, op="sum", tag="allreduce"):
        self.sizes.append(x.size)
        return super().allreduce(x, op, tag)


def params(rng, shapes, dtype=np.float32):
    return [Tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def test_gradients_go_in_buckets_of_at_most_bucket_bytes(rng):
    ps = params(rng, [(10, 10), (10,), (30, 10), (5,)])  # 400, 40, 1200 and 20 bytes
    for p in ps:
        p.grad = rng.standard_normal(p.shape).astype(np.float32)
    want = [p.grad.copy() for p in ps]
    c = CountingComm()
    reduce = GradientAllreduce(ps, c, bucket_bytes=500)
    assert reduce.buckets == [[0, 1], [2], [3]]
    reduce()
    assert c.sizes == [5 + 1, 300 + 1, 110 + 2]  # each bucket, the last first, and a has-a-gradient flag a parameter
    for p, g in zip(ps, want):
        np.testing.assert_array_equal(p.grad, g)


def test_a_parameter_without_a_gradient_anywhere_keeps_none(rng):
    ps = params(rng, [(3,), (4,)])
    ps[0].grad = np.ones(3, np.float32)
    GradientAllreduce(ps, LocalCommunicator())()
    assert ps[1].grad is None
    np.testing.assert_array_equal(ps[0].grad, np.ones(3))


def test_buckets_do_not_mix_dtypes_and_bad_sizes_are_refused(rng):
    ps = params(rng, [(2,)]) + params(rng, [(2,)], np.float64)
    assert GradientAllreduce(ps, LocalCommunicator()).buckets == [[0], [1]]
    with pytest.raises(ValueError, match="bucket_bytes=0"):
        GradientAllreduce(ps, LocalCommunicator(), bucket_bytes=0)


def test_broadcast_keeps_the_values_in_place(rng):
    ps = params(rng, [(2, 3)])
    before, data = ps[0].data.copy(), ps[0].data
    broadcast_parameters(ps, LocalCommunicator())
    assert ps[0].data is data
    np.testing.assert_array_equal(ps[0].data, before)


def test_slice_gradients_are_the_slices_added_in_slice_order(rng):
    ps = params(rng, [(3, 4), (4,), (2,)])
    grads = [[rng.standard_normal(p.shape).astype(np.float32) * 10.0 ** rng.integers(-3, 4) for p in ps[:2]]
             for _ in range(4)]
    gather = SliceGradients(ps, LocalCommunicator())
    assert gather.buckets == [[0, 1, 2]]  # a blocking communicator: one gather of every parameter
    for slice_grads in grads:
        for p, g in zip(ps, slice_grads):
            p.grad = g.copy()
        gather.keep()
        assert all(p.grad is None for p in ps)  # each slice's gradients are taken off the parameters
    gather()
    for i, p in enumerate(ps[:2]):
        want = grads[0][i].copy()
        for slice_grads in grads[1:]:
            want += slice_grads[i]  # left to right: the same bits on any world size
        np.testing.assert_array_equal(p.grad, want)
    assert ps[2].grad is None  # no slice had one


def test_slice_gradients_take_one_dtype(rng):
    with pytest.raises(ValueError, match="float32, float64"):
        SliceGradients(params(rng, [(2,)]) + params(rng, [(2,)], np.float64), LocalCommunicator())


def test_distribute_keeps_a_multi_hot_collections_pooling(rng):
    from gpuemb.distributed import distribute
    from gpuemb.models import build
    from gpuemb.store import TableConfig

    def model():
        return build("dcn", 2, [TableConfig(f"t{i}", 4) for i in range(2)], hotness=(2, 1), pooling="max", deep=(4,))

    ref, dist = model(), model()
    distribute(dist, LocalCommunicator())
    assert (dist.embeddings.hotness, dist.embeddings.mode) == ((2, 1), "max")
    dense, sparse = rng.random((5, 2)).astype(np.float32), rng.integers(0, 20, (5, 3))
    np.testing.assert_allclose(dist(dense, sparse).data, ref(dense, sparse).data, rtol=1e-6, atol=1e-7)
