"""DCN-v2's cross layers at a reduced precision: every matmul of the layer, forward and backward, asks cuBLASLt for
the precision's compute type, the arrays stay float32, and the values stay within that precision's rounding of the
float32 layer. On the emulated device, whose nvmath rounds the operands as the tensor cores read them.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import library, to_device, to_host
from gpuemb.kernels import mlp
from gpuemb.kernels.cross import Cross
from gpuemb.kernels.gemm import COMPUTE, matmul
from gpuemb.kernels.mlp import MatmulPlans

# relative error of the layer's output and gradients against float32: operands rounded to 11 (tf32, fp16) or
# 8 (bf16) significant bits, summed over D = 48 in float32
TOL = {"fp16": 4e-3, "bf16": 3e-2, "tf32": 4e-3}
MATMULS = {"matrix": 3, "lowrank": 6}  # forward and backward, per layer


@pytest.fixture
def asked(monkeypatch):
    """The compute type of every matmul run on the emulated device."""
    nvmath = library("nvmath.linalg.advanced")
    types, execute = [], nvmath.Matmul.execute

    def recording(self, **kw):
        types.append(self.compute_type.name)
        return execute(self, **kw)
    monkeypatch.setattr(nvmath.Matmul, "execute", recording)
    monkeypatch.setattr(mlp, "PLANS", MatmulPlans())
    return types


def layer(rng, form, B=32, D=48, r=12):
    shapes = [(B, D), (B, D)] + ([(D, D)] if form == "matrix" else [(D, r), (D, r)]) + [(D,)]
    return [(rng.standard_normal(s) / (np.sqrt(D) if s[0] == D and len(s) == 2 else 1)).astype(np.float32)
            for s in shapes]


def run(arrays, form, precision, gy):
    tensors = [Tensor(to_device(a), requires_grad=True) for a in arrays]
    y = Cross(form, precision).apply(*tensors)
    y.backward(to_device(gy))
    return [to_host(y.data)] + [to_host(t.grad) for t in tensors]


def relative(a, b):
    return np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b)


@pytest.mark.gpu
@pytest.mark.parametrize("form", list(MATMULS))
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_every_matmul_of_a_cross_layer_computes_at_the_precision(rng, asked, form, precision):
    arrays = layer(rng, form)
    gy = rng.standard_normal(arrays[0].shape).astype(np.float32)
    got = run(arrays, form, precision, gy)
    assert asked == [COMPUTE[precision]] * MATMULS[form]
    asked.clear()
    want = run(arrays, form, "fp32", gy)
    assert asked == []  # fp32 keeps CuPy's own matmul
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        assert relative(g, w) < TOL[precision]
    assert max(relative(g, w) for g, w in zip(got, want)) > 1e-7  # the rounding happened


@pytest.mark.gpu
def test_dcn_layers_at_tf32_ask_for_tf32_in_the_mlp_and_the_crosses(rng, asked):
    from gpuemb.models.dcn import CrossLayer
    from gpuemb.nn import MLP
    crosses = [CrossLayer(16, seed=1).set_precision("tf32"), CrossLayer(16, rank=4, seed=2).set_precision("tf32")]
    deep = MLP([16, 32, 1], seed=3).set_precision("tf32")
    x0 = Tensor(to_device(rng.standard_normal((8, 16)).astype(np.float32)), requires_grad=True)
    x = x0
    for c in crosses:
        x = c(x0, x)
    deep(x).sum().backward()
    assert asked and set(asked) == {"COMPUTE_32F_FAST_TF32"}


def test_reduced_precision_is_refused_on_the_cpu(rng):
    a = rng.standard_normal((4, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="precision tf32 runs on a GPU only.*precision='fp32'"):
        matmul(a, a, "tf32")
    with pytest.raises(ValueError, match="Cross: precision='fp64'; use one of fp32, fp16, bf16, tf32"):
        Cross("matrix", "fp64")
