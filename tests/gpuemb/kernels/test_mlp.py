import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import library, to_device, to_host
from gpuemb.kernels import mlp
from gpuemb.kernels.mlp import (PRECISIONS, FusedLayer, FusedMLP, MatmulPlans, cublaslt_mask_words, fused_linear,
                                input_grad, input_grad_cpu, input_grad_cuda, input_grad_ref, linear_forward,
                                linear_forward_cpu, linear_forward_cuda, linear_forward_ref, weight_grad,
                                weight_grad_cpu, weight_grad_cuda, weight_grad_ref)
from gpuemb.kernels.relu_dropout import dropout_scale, relu_dropout_backward_ref, relu_dropout_ref, unpack_bits_ref

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
    """``(y, masks, inputs)``: the reference forward of a stack, each layer's mask and input."""
    masks, inputs = [], []
    for layer, W, b in zip(layers, params[0::2], params[1::2]):
        inputs.append(x)
        x, mask = linear_forward_ref(x, W, b, layer.relu, layer.p, layer.seed, step, training)
        masks.append(mask)
    return x, masks, inputs


def _ref_stack_backward(params, layers, inputs, masks, gy, training=True):
    """``[gx, gW1, gb1, ...]`` of ``sum(y * gy)`` through the reference steps, the given masks applied."""
    scales = [dropout_scale(layer.p, training) for layer in layers]
    g = gy if masks[-1] is None else relu_dropout_backward_ref(gy, masks[-1], scales[-1])
    grads = [None] * len(params)
    for i in reversed(range(len(layers))):
        grads[2 * i], grads[2 * i + 1] = weight_grad_ref(g, inputs[i])
        g = input_grad_ref(g, params[2 * i], masks[i - 1] if i else None, scales[i - 1] if i else 1.0)[0]
    return [g, *grads]


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
    y_ref, masks, _ = _ref_stack(x, params, layers, step=5)
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
    # a float64 weight beside a float32 input would make every matmul a float64 one, at half the speed
    with pytest.raises(ValueError, match="the input is float32 but some weights or biases are float64"):
        FusedMLP([FusedLayer(True)]).apply(x, W.astype(np.float64), b)


# -- the device path (nvmath's Matmul and the relu_dropout kernels): a GPU, or the emulated device ---------------
# The error each precision is checked to, relative to the sum of the magnitudes of the terms each value adds up
# (``scale``: the same computation on absolute values), with which rounding errors grow; the result itself can be
# small by cancellation. float32 keeps 24 significant bits, float16 11 and bfloat16 8; float16's subnormals are
# 2**-24 apart, which bounds the error of a tiny value from below.
TOL = {"fp32": 1e-5, "fp16": 4e-3, "bf16": 2e-2}
FLOOR = {"fp32": 0.0, "fp16": 2.0 ** -24, "bf16": 0.0}
STACK_SIZES = [20, 130, 40, 1]  # 130 > 128: the ReLU bitmask has two 128-bit blocks per sample
STACKS = {"linear": [FusedLayer(), FusedLayer(), FusedLayer()],
          "relu": [FusedLayer(True), FusedLayer(True), FusedLayer()],
          "relu-dropout": [FusedLayer(True, 0.3, 1), FusedLayer(True, 0.3, 2), FusedLayer()]}


def _close(got, want, scale, precision):
    err = np.abs(to_host(got).astype(np.float64) - want)
    bound = TOL[precision] * np.asarray(scale, dtype=np.float64) + FLOOR[precision]
    assert (err <= bound).all(), f"{precision}: {(err > bound).sum()} of {err.size} off, {(err / bound).max():.1f}x"


def _close_away_from_zero(got_mask, z, z_scale, want_bits, cols, precision):
    # The device and NumPy round differently, so a pre-activation within rounding of 0 may take either sign.
    clear = np.abs(z) > 4 * TOL[precision] * z_scale
    np.testing.assert_array_equal(unpack_bits_ref(to_host(got_mask), cols)[clear], want_bits[clear])


def _magnitudes(*arrays):
    return [np.abs(a) for a in arrays]


def _on_device(precision, *arrays):
    """``(host, device, compute)``: the arrays as a device step takes them at ``precision`` (float16 copies for
    fp16), those values in float32 for the reference, and the compute type."""
    cast, compute = PRECISIONS[precision]
    device = [to_device(a if cast is None else a.astype(cast)) for a in arrays]
    return [to_host(d).astype(np.float32) for d in device], device, compute


@pytest.mark.gpu
@pytest.mark.parametrize("precision", TOL)
@pytest.mark.parametrize("act", ACTS, ids=["linear", "relu", "relu-dropout", "eval"])
def test_forward_cuda_matches_reference(rng, precision, act):
    (x, W, b), device, compute = _on_device(precision, *_layer(rng, 48, 40, 130))
    y, mask = linear_forward_cuda(*device, compute=compute, **act)
    y_ref, mask_ref = linear_forward_ref(x, W, b, **act)
    z_scale = linear_forward_ref(*_magnitudes(x, W, b))[0]
    assert y.dtype == device[0].dtype and y.shape == (48, 130) and y.flags.c_contiguous
    _close(y, y_ref, z_scale * dropout_scale(act.get("p", 0.0), act.get("training", True)), precision)
    assert (mask is None) == (mask_ref is None)
    if act["relu"]:
        assert mask.shape == (48, cublaslt_mask_words(130)) and mask.dtype == np.uint32
        _close_away_from_zero(mask, x @ W.T + b, z_scale, unpack_bits_ref(mask_ref, 130), 130, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", TOL)
@pytest.mark.parametrize("n_in,n_out", [(130, 40), (40, 1)])  # out = 1 takes the K = 1 fallback
def test_backward_steps_cuda_match_reference(rng, precision, n_in, n_out):
    x, W, _ = _layer(rng, 32, n_in, n_out)
    g = rng.standard_normal((32, n_out)).astype(np.float32)
    (g, W, x), (g_d, W_d, x_d), compute = _on_device(precision, g, W, x)
    _, mask = relu_dropout_ref(x, 0.5, seed=2, step=8, words_per_row=cublaslt_mask_words(n_in))
    for m in (mask, None):
        gx, gb = input_grad_cuda(g_d, W_d, None if m is None else to_device(m), 2.0, compute)
        gx_ref, gb_ref = input_grad_ref(g, W, m, 2.0)
        gx_scale, gb_scale = input_grad_ref(*_magnitudes(g, W), m, 2.0)
        assert gx.dtype == g_d.dtype and gx.flags.c_contiguous and (gb is None) == (m is None)
        _close(gx, gx_ref, gx_scale, precision)
        if m is not None:
            _close(gb, gb_ref, gb_scale, precision)
    for with_bias in (True, False):
        gW, gb = weight_grad_cuda(g_d, x_d, with_bias, compute)
        gW_ref, gb_ref = weight_grad_ref(g, x, with_bias)
        gW_scale, gb_scale = weight_grad_ref(*_magnitudes(g, x), with_bias)
        assert gW.dtype == g_d.dtype and gW.shape == (n_out, n_in) and gW.flags.c_contiguous
        _close(gW, gW_ref, gW_scale, precision)
        assert (gb is None) == (not with_bias)
        if with_bias:
            _close(gb, gb_ref, gb_scale, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", TOL)
@pytest.mark.parametrize("stack", STACKS)
def test_fused_mlp_on_the_device_matches_reference(rng, precision, stack):
    _check_stack_on_device(rng, precision, stack)


def _check_stack_on_device(rng, precision, stack):
    layers = STACKS[stack]
    x, params = _stack(rng, STACK_SIZES, 32)
    gy = rng.standard_normal((32, 1)).astype(np.float32)
    tensors = [Tensor(to_device(a), requires_grad=True) for a in (x, *params)]
    fn = FusedMLP(layers, step=5, precision=precision)
    y = fn.apply(*tensors)
    y.backward(to_device(gy))
    y_ref, masks_ref, inputs = _ref_stack(x, params, layers, step=5)
    absolute = _magnitudes(*params)
    y_scale, _, input_scales = _ref_stack(np.abs(x), absolute, layers, step=5)  # the same dropout draws
    assert y.data.dtype == np.float32
    _close(y.data, y_ref, y_scale, precision)
    for got, want, h, W, b, h_scale, W_abs, b_abs, cols in zip(fn.masks, masks_ref, inputs, params[0::2],
                                                              params[1::2], input_scales, absolute[0::2],
                                                              absolute[1::2], STACK_SIZES[1:]):
        assert (got is None) == (want is None)
        if got is not None:
            _close_away_from_zero(got, h @ W.T + b, h_scale @ W_abs.T + b_abs, unpack_bits_ref(want, cols), cols,
                                  precision)
    # The backward runs on the device's masks: a bit that flipped near 0 would move a whole row of a gradient.
    masks = [m if m is None else to_host(m) for m in fn.masks]
    grads = _ref_stack_backward(params, layers, inputs, masks, gy)
    scales = _ref_stack_backward(absolute, layers, input_scales, masks, np.abs(gy))
    for t, want, scale in zip(tensors, grads, scales):
        assert t.grad.dtype == np.float32
        _close(t.grad, want, scale, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", TOL)
def test_epilogs_that_cublaslt_refuses_fall_back_to_a_plain_matmul_and_a_kernel(rng, monkeypatch, precision):
    # cuBLASLt 13 on an H200 refused BGRADB for every MLP of the first GPU run (docs/perf/README.md): it says so
    # when planning, with CUBLAS_STATUS_NOT_SUPPORTED. Here the emulation refuses the two backward epilogs so.
    nvmath = library("nvmath.linalg.advanced")
    refuse = {nvmath.MatmulEpilog.BGRADB, nvmath.MatmulEpilog.DRELU_BGRAD}
    planned, plan = [], nvmath.Matmul.plan

    def refusing(self, *, epilog=None, **kw):
        planned.append(epilog)
        if epilog in refuse:
            raise RuntimeError("the requested functionality is not supported (CUBLAS_STATUS_NOT_SUPPORTED)")
        return plan(self, epilog=epilog, **kw)
    monkeypatch.setattr(nvmath.Matmul, "plan", refusing)
    monkeypatch.setattr(mlp, "PLANS", MatmulPlans())
    _check_stack_on_device(rng, precision, "relu-dropout")
    assert {p[0] for p in mlp.PLANS.refused} == {"BGRADB", "DRELU_BGRAD"}
    tried = len(planned)
    _check_stack_on_device(rng, precision, "relu-dropout")  # the same shapes: nothing is planned again
    assert len(planned) == tried


@pytest.mark.gpu
def test_an_error_other_than_not_supported_is_raised(rng, monkeypatch):
    nvmath = library("nvmath.linalg.advanced")
    monkeypatch.setattr(nvmath.Matmul, "plan", lambda self, **kw: (_ for _ in ()).throw(RuntimeError("out of memory")))
    monkeypatch.setattr(mlp, "PLANS", MatmulPlans())
    with pytest.raises(RuntimeError, match="out of memory"):
        linear_forward_cuda(*map(to_device, _layer(rng, 16, 20, 33)), relu=True)
    assert not mlp.PLANS.refused


@pytest.mark.gpu
def test_a_second_call_of_the_same_shape_reuses_the_plan(rng, monkeypatch):
    nvmath = library("nvmath.linalg.advanced")
    planned, plan = [], nvmath.Matmul.plan
    monkeypatch.setattr(nvmath.Matmul, "plan", lambda self, **kw: planned.append(self) or plan(self, **kw))
    monkeypatch.setattr(mlp, "PLANS", MatmulPlans(size=2))
    for _ in range(2):  # fresh operands each time: the second call must run on its own, not the planned ones
        x, W, b = _layer(rng, 16, 20, 33)
        y, _ = linear_forward_cuda(*map(to_device, (x, W, b)), relu=True)
        np.testing.assert_allclose(to_host(y), linear_forward_ref(x, W, b, relu=True)[0], rtol=1e-5, atol=1e-5)
    assert len(planned) == 1
    for B in (8, 4):  # two more problems: the first is dropped from a cache of two, and planned again
        linear_forward_cuda(*map(to_device, _layer(rng, B, 20, 33)), relu=True)
    assert len(mlp.PLANS.plans) == 2 and len(planned) == 3
    linear_forward_cuda(*map(to_device, _layer(rng, 16, 20, 33)), relu=True)
    assert len(planned) == 4


@pytest.mark.gpu
def test_a_training_step_plans_only_on_its_first_call(rng, monkeypatch):
    nvmath = library("nvmath.linalg.advanced")
    planned, plan = [], nvmath.Matmul.plan
    monkeypatch.setattr(nvmath.Matmul, "plan", lambda self, **kw: planned.append(self) or plan(self, **kw))
    monkeypatch.setattr(mlp, "PLANS", MatmulPlans())
    counts = []
    for step in range(2):
        x, params = _stack(rng, STACK_SIZES, 16)
        tensors = [Tensor(to_device(p), requires_grad=True) for p in params]
        y = FusedMLP(STACKS["relu"], step=step, precision="fp16").apply(to_device(x), *tensors)
        y.backward(to_device(np.ones((16, 1), np.float32)))
        counts.append(len(planned))
    assert counts[0] > 0 and counts[1] == counts[0]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", TOL)
def test_the_device_steps_take_an_empty_batch(rng, precision):
    _, (x, W, b, g), compute = _on_device(precision, *_layer(rng, 0, 20, 33), np.empty((0, 33), np.float32))
    for act in ACTS:
        y, mask = linear_forward_cuda(x, W, b, compute=compute, **act)
        assert y.shape == (0, 33) and y.dtype == x.dtype and (mask is None or mask.shape == (0, 4))
    gW, gb = weight_grad_cuda(g, x, compute=compute)
    assert gW.shape == (33, 20) and gb.shape == (33,) and not to_host(gW).any() and not to_host(gb).any()
    mask = to_device(np.zeros((0, cublaslt_mask_words(20)), np.uint32))
    gx, gb = input_grad_cuda(g, W, mask, 2.0, compute)
    assert gx.shape == (0, 20) and gb.shape == (20,) and not to_host(gb).any()


@pytest.mark.parametrize("stack", STACKS)
def test_an_empty_batch_gives_an_empty_output_and_zero_gradients(xp, rng, stack):
    x, params = _stack(rng, STACK_SIZES, 0)
    tensors = [Tensor(xp.asarray(a), requires_grad=True) for a in (x, *params)]
    y = FusedMLP(STACKS[stack], step=1).apply(*tensors)
    assert y.shape == (0, 1) and type(y.data) is type(tensors[0].data)
    y.backward(xp.ones((0, 1), dtype=np.float32))
    assert tensors[0].grad.shape == (0, 20)
    for t in tensors[1:]:
        assert t.grad.shape == t.shape and not to_host(t.grad).any()


@pytest.mark.real_gpu
def test_stack_on_gpu_matches_cpu_at_a_production_shape(rng):
    # Real cuBLASLt at a training shape, where it may pick split-K or other algorithms that small shapes do not
    # reach, against the CPU path: what the emulated nvmath assumes of it (bit layouts, bias gradients) holds.
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
