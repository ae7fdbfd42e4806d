import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.cross import (Cross, combine, combine_backward, combine_backward_cpu, combine_backward_cuda,
                                  combine_backward_ref, combine_cpu, combine_cuda, combine_ref, cross_ref)

SHAPES = [(1, 1), (7, 13), (64, 37), (5, 256)]  # B, D


def _operands(rng, B, D, h_cols, dtype=np.float32):
    x0, xl, h = (rng.standard_normal(s).astype(dtype) for s in [(B, D), (B, D), (B, h_cols)])
    return x0, h, rng.standard_normal(D).astype(dtype), xl


def _weights(rng, form, D, r=3):
    shapes = {"vector": [(D,)], "matrix": [(D, D)], "lowrank": [(D, r), (D, r)]}[form]
    return [rng.standard_normal(s) / np.sqrt(D) for s in shapes]


@pytest.mark.parametrize("B,D", SHAPES)
@pytest.mark.parametrize("inside,h_cols", [(True, "D"), (False, 1)])
def test_cpu_combine_matches_reference(rng, B, D, inside, h_cols):
    x0, h, b, xl = _operands(rng, B, D, D if h_cols == "D" else 1)
    np.testing.assert_allclose(combine_cpu(x0, h, b, xl, inside), combine_ref(x0, h, b, xl, inside), rtol=1e-6,
                               atol=1e-6)
    gy = rng.standard_normal((B, D)).astype(np.float32)
    for got, want in zip(combine_backward_cpu(gy, x0, h, b, inside), combine_backward_ref(gy, x0, h, b, inside)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["vector", "matrix", "lowrank"])
def test_function_forward_matches_reference(rng, form):
    x0, xl = rng.standard_normal((9, 6)), rng.standard_normal((9, 6))
    weights, b = _weights(rng, form, 6), rng.standard_normal(6)
    np.testing.assert_allclose(Cross(form).apply(x0, xl, *weights, b).data, cross_ref(x0, xl, weights, b, form),
                               rtol=1e-12)


@pytest.mark.parametrize("form", ["vector", "matrix", "lowrank"])
def test_function_gradcheck(rng, form):
    x0, xl = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    weights, b = _weights(rng, form, 5, r=2), rng.standard_normal(5)
    assert gradcheck(lambda *a: Cross(form).apply(*a), x0, xl, *weights, b)


def test_lowrank_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x0, xl, b = rng.standard_normal((8, 6)), rng.standard_normal((8, 6)), rng.standard_normal(6)
    U, V = _weights(rng, "lowrank", 6)
    ts = [torch.tensor(a, requires_grad=True) for a in (x0, xl, U, V, b)]
    ty = ts[0] * (ts[1] @ ts[2] @ ts[3].T + ts[4]) + ts[1]
    ty.pow(2).sum().backward()
    xs = [Tensor(a, requires_grad=True) for a in (x0, xl, U, V, b)]
    y = Cross("lowrank").apply(*xs)
    (y * y).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_wrong_weights_are_refused(rng):
    x0 = rng.standard_normal((2, 4))
    with pytest.raises(ValueError, match="takes 2 weight array"):
        Cross("lowrank").apply(x0, x0, rng.standard_normal((4, 4)), np.zeros(4))
    with pytest.raises(ValueError, match=r"want \[\(4, 4\)\]"):
        Cross("matrix").apply(x0, x0, rng.standard_normal((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match="form='diagonal'"):
        Cross("diagonal").apply(x0, x0, np.zeros(4), np.zeros(4))


def test_mismatched_combine_operands_are_refused(rng):
    x0, h, b, xl = _operands(rng, 3, 4, 4)
    with pytest.raises(ValueError, match=r"h \[B, D\] or \[B, 1\]"):
        combine(x0, h[:, :2], b, xl)
    with pytest.raises(ValueError, match="want x0 and gy"):
        combine_backward(xl[:2], x0, h, b)


def test_dispatch_on_each_backend(xp, rng):
    x0, h, b, xl = _operands(rng, 10, 12, 12)
    y = combine(*(xp.asarray(a) for a in (x0, h, b, xl)))
    assert type(y) is type(xp.asarray(x0))
    np.testing.assert_allclose(to_host(y), combine_ref(x0, h, b, xl), rtol=1e-6, atol=1e-6)
    gy = rng.standard_normal((10, 12)).astype(np.float32)
    got = combine_backward(*(xp.asarray(a) for a in (gy, x0, h, b)))
    for g, want in zip(got, combine_backward_ref(gy, x0, h, b)):
        np.testing.assert_allclose(to_host(g), want, rtol=1e-6, atol=1e-6)


@pytest.mark.cudasim
@pytest.mark.parametrize("B,D,inside,h_cols", [(1, 1, True, 1), (3, 37, True, 37), (4, 20, False, 1)])
def test_cuda_kernels_match_reference(rng, B, D, inside, h_cols):
    x0, h, b, xl = _operands(rng, B, D, h_cols)
    np.testing.assert_allclose(combine_cuda(x0, h, b, xl, inside), combine_ref(x0, h, b, xl, inside), rtol=1e-6,
                               atol=1e-6)
    gy = rng.standard_normal((B, D)).astype(np.float32)
    for got, want in zip(combine_backward_cuda(gy, x0, h, b, inside), combine_backward_ref(gy, x0, h, b, inside)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
@pytest.mark.parametrize("form", ["vector", "matrix", "lowrank"])
def test_layer_on_real_shapes(rng, form):
    x0, xl = rng.standard_normal((4096, 512)).astype(np.float32), rng.standard_normal((4096, 512)).astype(np.float32)
    weights = [w.astype(np.float32) for w in _weights(rng, form, 512, r=64)]
    b = rng.standard_normal(512).astype(np.float32)
    y = Cross(form).apply(*(to_device(a) for a in (x0, xl, *weights, b)))
    np.testing.assert_allclose(to_host(y.data), cross_ref(x0, xl, weights, b, form), rtol=1e-4, atol=1e-3)
