import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.fm import (FMInteraction, fm, fm_backward, fm_backward_cpu, fm_backward_cuda, fm_backward_ref,
                               fm_cpu, fm_cuda, fm_ref)

SHAPES = [(1, 1, 1), (5, 3, 7), (33, 26, 16), (4, 39, 130)]  # B, F, D


def test_reference_is_the_sum_of_pairwise_products(rng):
    emb = rng.standard_normal((3, 5, 4))
    pairs = sum(emb[:, f] * emb[:, g] for f in range(5) for g in range(f + 1, 5))
    np.testing.assert_allclose(fm_ref(emb, reduce=False), pairs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fm_ref(emb), pairs.sum(axis=1, keepdims=True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("B,F,D", SHAPES)
@pytest.mark.parametrize("reduce", [True, False])
def test_cpu_matches_reference(rng, B, F, D, reduce):
    emb = rng.standard_normal((B, F, D)).astype(np.float32)
    y = fm_cpu(emb, reduce)
    assert y.shape == (B, 1 if reduce else D)
    np.testing.assert_allclose(y, fm_ref(emb, reduce), rtol=1e-4, atol=1e-4 * F * np.sqrt(D))
    gy = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(fm_backward_cpu(gy, emb), fm_backward_ref(gy, emb), rtol=1e-5, atol=1e-5 * F)


@pytest.mark.parametrize("reduce", [True, False])
def test_function_gradcheck(rng, reduce):
    assert gradcheck(lambda e: FMInteraction(reduce).apply(e), rng.standard_normal((3, 4, 5)))


def test_function_matches_torch(rng):
    torch = pytest.importorskip("torch")
    emb = rng.standard_normal((6, 8, 4))
    te = torch.tensor(emb, requires_grad=True)
    ty = 0.5 * (te.sum(1) ** 2 - (te ** 2).sum(1)).sum(1, keepdim=True)
    ty.sum().backward()
    e = Tensor(emb, requires_grad=True)
    y = FMInteraction().apply(e)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(e.grad, te.grad.numpy(), rtol=1e-12)


def test_bad_gradient_shape_is_refused(rng):
    emb = rng.standard_normal((2, 3, 4))
    with pytest.raises(ValueError, match=r"gradient of shape \(2, 3\)"):
        fm_backward(np.ones((2, 3)), emb)


def test_dispatch_on_each_backend(xp, rng):
    emb = rng.standard_normal((9, 5, 6)).astype(np.float32)
    y = fm(xp.asarray(emb), reduce=False)
    assert type(y) is type(xp.asarray(emb))
    np.testing.assert_allclose(to_host(y), fm_ref(emb, False), rtol=1e-5, atol=1e-5)
    gy = rng.standard_normal((9, 1)).astype(np.float32)
    np.testing.assert_allclose(to_host(fm_backward(xp.asarray(gy), xp.asarray(emb))), fm_backward_ref(gy, emb),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.cudasim
@pytest.mark.parametrize("B,F,D,reduce", [(1, 1, 1, True), (3, 5, 7, False), (2, 4, 33, True)])
def test_cuda_kernels_match_reference(rng, B, F, D, reduce):
    emb = rng.standard_normal((B, F, D)).astype(np.float32)
    y = fm_cuda(emb, reduce)
    np.testing.assert_allclose(y, fm_ref(emb, reduce), rtol=1e-5, atol=1e-5)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(fm_backward_cuda(gy, emb), fm_backward_ref(gy, emb), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
@pytest.mark.parametrize("reduce", [True, False])
def test_cuda_kernels_on_real_shapes(rng, reduce):
    emb = rng.standard_normal((4096, 39, 64)).astype(np.float32)
    y = fm_cuda(to_device(emb), reduce)
    np.testing.assert_allclose(to_host(y), fm_ref(emb, reduce), rtol=1e-4, atol=1e-2)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(to_host(fm_backward_cuda(to_device(gy), to_device(emb))), fm_backward_ref(gy, emb),
                               rtol=1e-4, atol=1e-4)
