"""The dot interaction under --precision fp16: float16 kernels on copies, float32 at the op's boundary.

There is no GPU here, so the CUDA kernels are replaced by NumPy stand-ins (the references) that record the dtype
they were handed; the casts around them are the code under test.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
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


def test_bf16_computes_in_float32(seen, rng):
    bottom, emb = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 2, 4)).astype(np.float32)
    run("bf16", bottom, emb, rng.standard_normal((3, 8)).astype(np.float32))
    assert {dtype for _, *dtypes in seen for dtype in dtypes} == {"float32"}


def test_fp16_is_refused_on_the_cpu(rng):
    with pytest.raises(ValueError, match="precision fp16 runs on a GPU only"):
        run("fp16", rng.standard_normal((2, 4)).astype(np.float32),
            rng.standard_normal((2, 2, 4)).astype(np.float32), np.ones((2, 8), np.float32))


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision='fp8'; use fp32, fp16, bf16 or tf32"):
        di.DotInteraction(precision="fp8")


@pytest.mark.parametrize("name", ["dlrm", "pnn"])
def test_the_models_hand_their_precision_to_the_interaction(seen, rng, name):
    model = build(name, 3, TableConfig("t", 4), n_features=2)
    model.precision = "fp16"  # the model's own, as set_precision sets it; its MLPs stay fp32 on the CPU
    model.head(rng.standard_normal((5, 3)).astype(np.float32), Tensor(rng.standard_normal((5, 2, 4)).astype(np.float32)))
    assert seen and seen[0][1:] == ("float16", "float16")
