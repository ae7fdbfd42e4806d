"""Mixed precision in the fused MLP: float32 master weights and boundaries, reduced-precision compute inside.

There is no GPU here, so the CUDA steps are replaced by NumPy stand-ins (the references) that record the dtypes
and the cuBLASLt compute type they were handed; the casts around them are the code under test.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.kernels import mlp
from gpuemb.kernels.mlp import FusedLayer, FusedMLP, input_grad_ref, linear_forward_ref, weight_grad_ref
from gpuemb.kernels.relu_dropout import relu_dropout_backward_ref
from gpuemb.nn import MLP

LAYERS = [FusedLayer(True, 0.3, 5), FusedLayer(True, 0.0, 6), FusedLayer(False, 0.0, 7)]
SIZES = [12, 16, 8, 1]


@pytest.fixture
def seen(monkeypatch):
    """Route the GPU steps to the references on NumPy arrays; returns the (step, dtype, compute) calls."""
    calls = []

    def record(name, ref):
        def run(*args, **kw):
            *args, compute = args
            calls.append((name, args[0].dtype.name, compute))
            return ref(*args, **kw)
        return run

    monkeypatch.setattr(mlp, "is_device_array", lambda a: True)
    monkeypatch.setattr(mlp, "linear_forward_cuda", record("forward", linear_forward_ref))
    monkeypatch.setattr(mlp, "weight_grad_cuda", record("weight_grad", weight_grad_ref))
    monkeypatch.setattr(mlp, "input_grad_cuda", record("input_grad", input_grad_ref))
    monkeypatch.setattr(mlp, "relu_dropout_backward", relu_dropout_backward_ref)
    return calls


def stack(rng):
    x = Tensor(rng.standard_normal((10, SIZES[0])).astype(np.float32), requires_grad=True)
    params = []
    for n_in, n_out in zip(SIZES, SIZES[1:]):
        params += [Tensor((rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32), requires_grad=True),
                   Tensor(rng.standard_normal(n_out).astype(np.float32), requires_grad=True)]
    return x, params


def run(precision, x, params, gy):
    for t in (x, *params):
        t.grad = None
    y = FusedMLP(LAYERS, step=2, precision=precision).apply(x, *params)
    (y * Tensor(gy)).sum().backward()
    return y.data, [t.grad for t in (x, *params)]


def test_fp16_computes_in_float16_on_copies_and_hands_back_float32(seen, rng):
    x, params = stack(rng)
    gy = rng.standard_normal((10, 1)).astype(np.float32)
    y16, g16 = run("fp16", x, params, gy)
    assert {(dtype, compute) for _, dtype, compute in seen} == {("float16", "COMPUTE_32F")}
    assert [name for name, *_ in seen].count("forward") == 3
    assert y16.dtype == np.float32 and all(g.dtype == np.float32 for g in g16)
    assert all(p.data.dtype == np.float32 for p in params)  # the master weights stay float32
    # The same chain on float16 copies, step by step, is exactly what came back.
    h = [p.data.astype(np.float16) for p in params]
    z = x.data.astype(np.float16)
    for layer, W, b in zip(LAYERS, h[0::2], h[1::2]):
        z, _ = linear_forward_ref(z, W, b, layer.relu, layer.p, layer.seed, 2)
    np.testing.assert_array_equal(y16, z.astype(np.float32))
    seen.clear()
    y32, g32 = run("fp32", x, params, gy)
    assert {(dtype, compute) for _, dtype, compute in seen} == {("float32", None)}
    np.testing.assert_allclose(y16, y32, rtol=2e-2, atol=2e-2)
    for a, b in zip(g16, g32):
        np.testing.assert_allclose(a, b, rtol=5e-2, atol=5e-2 * np.abs(b).max())


@pytest.mark.parametrize("precision,compute", [("bf16", "COMPUTE_32F_FAST_16BF"), ("tf32", "COMPUTE_32F_FAST_TF32")])
def test_bf16_and_tf32_keep_float32_arrays_and_ask_for_the_tensor_cores(seen, rng, precision, compute):
    x, params = stack(rng)
    y, grads = run(precision, x, params, rng.standard_normal((10, 1)).astype(np.float32))
    assert {(dtype, c) for _, dtype, c in seen} == {("float32", compute)}
    assert y.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_reduced_precision_is_refused_on_the_cpu(rng, precision):
    x, params = stack(rng)
    with pytest.raises(ValueError, match=f"{mlp.PRECISIONS[precision][1]} .*runs on a GPU only.*precision='fp32'"):
        FusedMLP(LAYERS, precision=precision).apply(x, *params)
    with pytest.raises(ValueError, match="precision='fp8'; use one of fp32, fp16, bf16, tf32"):
        FusedMLP(LAYERS, precision="fp8")


def test_set_precision_reaches_every_layer_of_a_module_tree(seen, rng):
    model = MLP(SIZES, seed=1).set_precision("fp16")
    assert model.precision == "fp16" and all(layer.precision == "fp16" for layer in model.layers)
    y = model(Tensor(rng.standard_normal((4, SIZES[0])).astype(np.float32)))
    assert y.dtype == np.float32 and {dtype for _, dtype, _ in seen} == {"float16"}
    with pytest.raises(ValueError, match="set_precision: 'half'"):
        model.set_precision("half")
