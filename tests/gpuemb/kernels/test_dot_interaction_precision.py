"""The dot interaction at a reduced precision: under fp16, float16 kernels on copies, float32 at the op's boundary;
under bf16 and tf32, the reference's batched matmuls through cuBLASLt at the compute type.

For fp16 the CUDA kernels are replaced by NumPy stand-ins (the references) that record the dtype they were handed;
the casts around them are the code under test. bf16 and tf32 run on the emulated device, whose nvmath rounds the
operands as the compute type says.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend
from gpuemb.kernels import dot_interaction as di
from gpuemb.models import build
from gpuemb.store.options import TableConfig


@pytest.fixture
def seen(monkeypatch):
    calls = []

    def record(name, ref):
        def run(*args):
            calls.append((name, *(a.dtype.name for a in args if hasattr(a, "dtype"))))
            return ref(*args)
        return run

    monkeypatch.setattr(di, "is_device_array", lambda a: True)
    monkeypatch.setattr(di, "dot_interaction_cuda", record("forward", di.dot_interaction_ref))
    monkeypatch.setattr(di, "dot_interaction_backward_cuda", record("backward", di.dot_interaction_backward_ref))
    return calls


def run(precision, bottom, emb, gy):
    b, e = Tensor(bottom, requires_grad=True), Tensor(emb, requires_grad=True)
    y = di.DotInteraction(False, 8, precision).apply(b, e)
    (y * Tensor(gy)).sum().backward()
    return y.data, b.grad, e.grad


def test_fp16_runs_the_kernels_in_float16_and_hands_back_float32(seen, rng):
    bottom = rng.standard_normal((6, 4)).astype(np.float32)
    emb = rng.standard_normal((6, 3, 4)).astype(np.float32)
    gy = rng.standard_normal((6, 16)).astype(np.float32)
    y16, gb16, ge16 = run("fp16", bottom, emb, gy)
    assert seen == [("forward", "float16", "float16"), ("backward", "float16", "float16", "float16")]
    assert y16.dtype == gb16.dtype == ge16.dtype == np.float32
    seen.clear()
    y32, gb32, ge32 = run("fp32", bottom, emb, gy)
    assert {dtype for _, *dtypes in seen for dtype in dtypes} == {"float32"}
    for half, full in [(y16, y32), (gb16, gb32), (ge16, ge32)]:
        np.testing.assert_allclose(half, full, rtol=2e-2, atol=2e-2)  # float16 rounding of inputs and results
        assert not np.array_equal(half, full)  # it really computed in float16


@pytest.mark.gpu
@pytest.mark.parametrize("self_interaction", [False, True])
@pytest.mark.parametrize("precision,compute,tol", [("bf16", "COMPUTE_32F_FAST_16BF", 2e-2),
                                                   ("tf32", "COMPUTE_32F_FAST_TF32", 3e-3)])
def test_bf16_and_tf32_run_the_gram_products_on_the_tensor_cores(rng, monkeypatch, self_interaction, precision,
                                                                   compute, tol):
    from gpuemb.autograd.backend import library, to_device, to_host
    from gpuemb.kernels import mlp
    nvmath = library("nvmath.linalg.advanced")
    asked, execute = [], nvmath.Matmul.execute
    monkeypatch.setattr(nvmath.Matmul, "execute", lambda self, **kw: asked.append(self.compute_type.name)
                        or execute(self, **kw))
    monkeypatch.setattr(mlp, "PLANS", mlp.MatmulPlans())
    B, F, D = 6, 5, 16
    bottom, emb = rng.standard_normal((B, D)).astype(np.float32), rng.standard_normal((B, F, D)).astype(np.float32)
    width = di.output_width(F, D, self_interaction, 8)
    gy = rng.standard_normal((B, width)).astype(np.float32)
    b, e = Tensor(to_device(bottom), requires_grad=True), Tensor(to_device(emb), requires_grad=True)
    y = di.DotInteraction(self_interaction, 8, precision).apply(b, e)
    y.backward(to_device(gy))
    assert asked == [compute, compute]  # Z·Zᵀ forward, (G + Gᵀ)·Z backward
    want = di.dot_interaction_ref(bottom, emb, self_interaction, 8)
    got = to_host(y.data)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got[:, :D], bottom)  # the bottom passes through
    np.testing.assert_array_equal(got[:, D + di.pair_count(F + 1, self_interaction):], 0)  # the padding
    want_b, want_e = di.dot_interaction_backward_ref(gy, bottom, emb, self_interaction)
    for g, w in [(got, want), (to_host(b.grad), want_b), (to_host(e.grad), want_e)]:
        assert np.linalg.norm(g - w) / np.linalg.norm(w) < tol
    # the emulated nvmath rounds the operands as the compute type says; cuBLASLt's FAST types allow that rounding
    # and need not do it: on an H200 it computed these tiny products in full fp32 (the tensor cores at scale)
    assert backend.real_gpu() or not np.allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.gpu
def test_a_gpu_that_refuses_the_batched_matmul_runs_the_kernels_and_says_so(rng, monkeypatch):
    from gpuemb.autograd.backend import to_device, to_host

    def refuse(*args):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")
    monkeypatch.setattr(di, "matmul", refuse)
    monkeypatch.setattr(di, "backend_real_gpu", lambda: True)  # the emulated device raises instead: it must not hide
    monkeypatch.setattr(di, "REFUSED", {})
    bottom, emb = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 2, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="batched tf32 matmul failed .*CUBLAS_STATUS_NOT_SUPPORTED.*float32"):
        y = di.DotInteraction(False, 8, "tf32").apply(Tensor(to_device(bottom)), Tensor(to_device(emb)))
    np.testing.assert_allclose(to_host(y.data), di.dot_interaction_ref(bottom, emb), rtol=1e-5, atol=1e-5)
    assert "tf32" in di.REFUSED


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_reduced_precision_is_refused_on_the_cpu(rng, precision):
    with pytest.raises(ValueError, match=f"precision {precision} runs on a GPU only"):
        run(precision, rng.standard_normal((2, 4)).astype(np.float32),
            rng.standard_normal((2, 2, 4)).astype(np.float32), np.ones((2, 8), np.float32))


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision='fp8'; use fp32, fp16, bf16 or tf32"):
        di.DotInteraction(precision="fp8")


@pytest.mark.parametrize("name", ["dlrm", "pnn"])
def test_the_models_hand_their_precision_to_the_interaction(seen, rng, name):
    model = build(name, 3, TableConfig("t", 4), n_features=2)
    model.precision = "fp16"  # the model's own, as set_precision sets it; its MLPs stay fp32 on the CPU
    model.head(rng.standard_normal((5, 3)).astype(np.float32),
               Tensor(rng.standard_normal((5, 2, 4)).astype(np.float32)))
    assert seen and seen[0][1:] == ("float16", "float16")
