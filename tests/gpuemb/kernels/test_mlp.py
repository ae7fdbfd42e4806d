import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.mlp import (FusedLayer, FusedMLP, cublaslt_mask_words, fused_linear, input_grad, input_grad_cpu,
                                input_grad_cuda, input_grad_ref, linear_forward, linear_forward_cpu,
                                linear_forward_cuda, linear_forward_ref, weight_grad, weight_grad_cuda,
                                weight_grad_cpu, weight_grad_ref)
from gpuemb.kernels.relu_dropout import relu_dropout_ref, unpack_bits_ref

SHAPES = [(1, 5, 3), (4, 7, 33), (16, 40, 100), (9, 64, 1)]  # B, in, out: B = 1, out = 1, out off 32s
ACTS = [dict(relu=False), dict(relu=True), dict(relu=True, p=0.4, seed=7, step=3),
        dict(relu=True, p=0.4, seed=7, step=3, training=False)]


def _layer(rng, B, n_in, n_out, dtype=np.float32):
    return (rng.standard_normal((B, n_in)).astype(dtype), rng.standard_normal((n_out, n_in)).astype(dtype),
            rng.standard_normal(n_out).astype(dtype))


def _stack(rng, sizes, B, dtype=np.float32):
    x = rng.standard_normal((B, sizes[0])).astype(dtype)
    params = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        params += [rng.standard_normal((n_out, n_in)).astype(dtype), rng.standard_normal(n_out).astype(dtype)]
    return x, params


def _ref_stack(x, params, layers, step, training=True):
    masks = []
    for layer, W, b in zip(layers, params[0::2], params[1::2]):
        x, mask = linear_forward_ref(x, W, b, layer.relu, layer.p, layer.seed, step, training)
        masks.append(mask)
    return x, masks


@pytest.mark.parametrize("B,n_in,n_out", SHAPES)
@pytest.mark.parametrize("act", ACTS, ids=["linear", "relu", "relu-dropout", "eval"])
def test_forward_cpu_matches_reference(rng, B, n_in, n_out, act):
    x, W, b = _layer(rng, B, n_in, n_out)
    y, mask = linear_forward_cpu(x, W, b, **act)
    y_ref, mask_ref = linear_forward_ref(x, W, b, **act)
    np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
    assert (mask is None) == (mask_ref is None)
    if mask is not None:
        np.testing.assert_array_equal(mask, mask_ref)
        assert (unpack_bits_ref(mask, n_out) == (y != 0)).all()


def test_forward_is_linear_then_relu_dropout(rng):
    x, W, b = _layer(rng, 32, 20, 50)
    y, mask = linear_forward_cpu(x, W, b, relu=True, p=0.5, seed=1, step=2)
    y_ref, mask_ref = relu_dropout_ref(x @ W.T + b, 0.5, seed=1, step=2)
    np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(mask, mask_ref)
    assert 0.15 < unpack_bits_ref(mask, 50).mean() < 0.35  # about half the positives, a quarter in all


@pytest.mark.parametrize("B,n_in,n_out", SHAPES)
def test_backward_steps_cpu_match_reference(rng, B, n_in, n_out):
    x, W, _ = _layer(rng, B, n_in, n_out)
    g = rng.standard_normal((B, n_out)).astype(np.float32)
    _, mask = relu_dropout_ref(x, 0.3, seed=4, step=1)
    for m in (None, mask):
        got, want = input_grad_cpu(g, W, m, 1 / 0.7), input_grad_ref(g, W, m, 1 / 0.7)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        if m is not None:
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[1], got[0].sum(axis=0), rtol=1e-5, atol=1e-5)
    gW, gb = weight_grad(g, x)
    np.testing.assert_allclose(gW, g.T @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, g.sum(axis=0), rtol=1e-5, atol=1e-5)
    assert weight_grad(g, x, with_bias=False)[1] is None


@pytest.mark.parametrize("n_in,n_out", [(40, 7), (7, 40), (12, 12)], ids=["wide-in", "wide-out", "square"])
def test_cpu_weight_gradient_in_either_orientation(rng, n_in, n_out):
    # the CPU forms whichever of g.T @ x and (x.T @ g).T is the taller product: both must give row-major g.T @ x
    x, g = rng.standard_normal((30, n_in)).astype(np.float32), rng.standard_normal((30, n_out)).astype(np.float32)
    gW, gb = weight_grad_cpu(g, x)
    assert gW.shape == (n_out, n_in) and gW.flags.c_contiguous
    np.testing.assert_allclose(gW, g.astype(np.float64).T @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, g.sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ACTS, ids=["linear", "relu", "relu-dropout", "eval"])
def test_gradcheck_one_layer(rng, act):
    x, W, b = _layer(rng, 4, 6, 35, np.float64)
    assert gradcheck(lambda *t: fused_linear(*t, **act), x, W, b)


@pytest.mark.parametrize("last_relu", [False, True])
def test_gradcheck_stack(rng, last_relu):
    x, params = _stack(rng, [5, 8, 33, 3], 4, np.float64)
    layers = [FusedLayer(True, 0.3, 11), FusedLayer(True, 0.5, 12), FusedLayer(last_relu)]
    assert gradcheck(lambda *t: FusedMLP(layers, step=9).apply(*t), x, *params)


def test_stack_matches_reference_chain_and_skips_constant_input(rng):
    x, params = _stack(rng, [16, 64, 40, 1], 24)
    layers = [FusedLayer(True, 0.25, 1), FusedLayer(True, 0.25, 2), FusedLayer()]
    tensors = [Tensor(p, requires_grad=True) for p in params]
    fn = FusedMLP(layers, step=5)
    y = fn.apply(x, *tensors)
    y_ref, masks = _ref_stack(x, params, layers, step=5)
    np.testing.assert_allclose(y.data, y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(fn.masks, masks):
        assert (got is None and want is None) or (got == want).all()
    y.backward(np.ones_like(y.data))
    # The first layer's pre-activation gradient: ones through W3 and W2, masked by each hidden layer's bits.
    g = np.ones_like(y_ref)
    for i in (2, 1):
        g = input_grad_ref(g, params[2 * i], masks[i - 1], 1 / 0.75)[0]
    np.testing.assert_allclose(tensors[1].grad, g.sum(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tensors[0].grad, g.T @ x, rtol=1e-4, atol=1e-4)


def test_dispatch_on_each_backend(xp, rng):
    x, params = _stack(rng, [12, 130, 7], 10)
    layers = [FusedLayer(True, 0.5, 3), FusedLayer()]
    y = FusedMLP(layers, step=1).apply(xp.asarray(x), *[Tensor(xp.asarray(p), requires_grad=True) for p in params])
    assert type(y.data) is type(xp.asarray(x))
    np.testing.assert_allclose(to_host(y.data), _ref_stack(x, params, layers, step=1)[0], rtol=1e-4, atol=1e-4)


def test_bad_configurations_are_refused(rng):
    x, W, b = _layer(rng, 2, 3, 4)
    with pytest.raises(ValueError, match="needs relu=True"):
        FusedMLP([FusedLayer(relu=False, p=0.5)])
    with pytest.raises(ValueError, match="2 layers need 4 weights"):
        FusedMLP([FusedLayer(True), FusedLayer()]).apply(x, W, b)
    with pytest.raises(ValueError, match=r"want x \[B, in\]"):
        linear_forward(x, W.T, b)


# -- the cuBLASLt path (nvmath-python on CuPy), on a real GPU only ----------------------------------------------
def _close_away_from_zero(got_mask, z, want_bits, cols):
    # cuBLAS and NumPy round differently, so a pre-activation within a hair of 0 may take either sign.
    clear = np.abs(z) > 1e-3
    np.testing.assert_array_equal(unpack_bits_ref(to_host(got_mask), cols)[clear], want_bits[clear])


@pytest.mark.gpu
@pytest.mark.parametrize("act", ACTS, ids=["linear", "relu", "relu-dropout", "eval"])
def test_forward_cuda_matches_reference(rng, act):
    x, W, b = _layer(rng, 2048, 512, 256)
    y, mask = linear_forward_cuda(*map(to_device, (x, W, b)), **act)
    y_ref, mask_ref = linear_forward_ref(x, W, b, **act)
    np.testing.assert_allclose(to_host(y), y_ref, rtol=1e-3, atol=1e-3)
    if act["relu"]:
        assert mask.shape == (2048, cublaslt_mask_words(256))
        _close_away_from_zero(mask, x @ W.T + b, unpack_bits_ref(mask_ref, 256), 256)


@pytest.mark.gpu
@pytest.mark.parametrize("n_in,n_out", [(512, 256), (100, 1)])  # out = 1 takes the K = 1 fallback
def test_backward_steps_cuda_match_reference(rng, n_in, n_out):
    x, W, _ = _layer(rng, 1024, n_in, n_out)
    g = rng.standard_normal((1024, n_out)).astype(np.float32)
    _, mask = relu_dropout_ref(x, 0.5, seed=2, step=8, words_per_row=cublaslt_mask_words(n_in))
    gx, gb = input_grad_cuda(to_device(g), to_device(W), to_device(mask), 2.0)
    gx_ref, gb_ref = input_grad_ref(g, W, mask, 2.0)
    np.testing.assert_allclose(to_host(gx), gx_ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(to_host(gb).ravel(), gb_ref, rtol=1e-3, atol=1e-2)
    gW, gb = weight_grad_cuda(to_device(g), to_device(x))
    gW_ref, gb_ref = weight_grad_ref(g, x)
    np.testing.assert_allclose(to_host(gW), gW_ref, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(to_host(gb).ravel(), gb_ref, rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_stack_on_gpu_matches_cpu(rng):
    x, params = _stack(rng, [512, 256, 128, 1], 2048)
    layers = [FusedLayer(True, 0.5, 1), FusedLayer(True, 0.5, 2), FusedLayer()]
    grads = []
    for move in (np.asarray, to_device):
        tensors = [Tensor(move(p), requires_grad=True) for p in params]
        y = FusedMLP(layers, step=4).apply(move(x), *tensors)
        y.backward(move(np.ones(y.shape, dtype=np.float32)))
        grads.append([to_host(t.grad) for t in tensors])
    # A hidden pre-activation within rounding of 0 may flip its ReLU bit between cuBLAS and NumPy and move a whole
    # row of a weight gradient, so compare in norm rather than element by element.
    for got, want in zip(*grads):
        assert np.linalg.norm(got - want) < 1e-3 * np.linalg.norm(want)
