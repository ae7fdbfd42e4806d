"""The one-pass dense kernels (optim/dense_kernels.py) give the very bits of their rule's NumPy update."""
import numpy as np
import pytest

import gpuemb.optim.adagrad
import gpuemb.optim.adam
from gpuemb.optim import dense_kernels
from gpuemb.optim.adagrad import AdagradRule
from gpuemb.optim.adam import AdamRule

RULES = {"adagrad": AdagradRule(initial_accumulator_value=0.1, eps=1e-6),
         "adagrad-decay": AdagradRule(weight_decay=0.01),
         "adam": AdamRule(),
         "adam-l2": AdamRule(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.02),
         "adamw": AdamRule(weight_decay=0.05, decoupled=True)}


def steps(rule, w, grads, lr, fused, monkeypatch):
    """``w`` after one update a gradient of ``grads``, by the kernel (``fused``) or by the rule's NumPy math."""
    with monkeypatch.context() as m:
        if not fused:
            for module in (gpuemb.optim.adagrad, gpuemb.optim.adam):
                m.setattr(module, "fusable", lambda *a: False)
        w, state = w.copy(), rule.init_state(w)
        for step, grad in enumerate(grads, 1):
            rule.update(w, grad, state, lr, step)
    return w, state


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 17, 100_003])
def test_the_kernel_matches_the_numpy_update_bit_for_bit_over_several_steps(rule, dtype, size, monkeypatch):
    rng = np.random.default_rng(size)
    w = rng.standard_normal(size).astype(dtype)
    grads = [(rng.standard_normal(size) * 10.0 ** rng.integers(-3, 2)).astype(dtype) for _ in range(3)]
    assert dense_kernels.fusable(0.05, w, *grads)
    fused, fused_state = steps(RULES[rule], w, grads, 0.05, True, monkeypatch)
    ref, ref_state = steps(RULES[rule], w, grads, 0.05, False, monkeypatch)
    np.testing.assert_array_equal(fused, ref)
    for k in ref_state:
        np.testing.assert_array_equal(fused_state[k], ref_state[k])
    assert np.all(fused != w)  # every weight moved


def test_adagrad_is_the_math_its_docstring_states():
    rng = np.random.default_rng(1)
    w, grad = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    ref, acc = w.copy(), np.full_like(w, 0.1)
    AdagradRule(0.1, 1e-6, 0.01).update(w, grad, {"sum": np.full_like(w, 0.1)}, 0.05, 1)
    g = grad + 0.01 * ref
    acc += g * g
    ref -= 0.05 * g / (np.sqrt(acc) + 1e-6)
    np.testing.assert_array_equal(w, ref)


def test_what_the_kernels_do_not_take_goes_to_numpy_with_the_same_result():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    grad = rng.standard_normal((8, 64)).astype(np.float32).T  # a transposed view: not C-contiguous
    acc = np.full_like(w, 0.1)
    assert not dense_kernels.fusable(0.1, w, grad, acc)
    assert not dense_kernels.fusable(np.float64(0.1), w, np.ascontiguousarray(grad), acc)  # NumPy: float64 math
    assert not dense_kernels.fusable(0.1, w.astype(np.float16), grad.astype(np.float16), acc.astype(np.float16))
    ref_w, ref_acc = w.copy(), acc.copy()
    AdagradRule().update(w, grad, {"sum": acc}, 0.1, 1)
    g = np.ascontiguousarray(grad)
    ref_acc += g * g
    ref_w -= 0.1 * g / (np.sqrt(ref_acc) + 1e-10)
    np.testing.assert_array_equal(w, ref_w)
    np.testing.assert_array_equal(acc, ref_acc)


def test_rows_with_a_step_each_take_the_numpy_update():
    rng = np.random.default_rng(2)
    rows, grad = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(2))
    state = AdamRule().init_state(rows)
    step = np.array([[1], [3], [2], [1], [7]])  # the store's per-row counts: not the kernel's one int
    want = rows.copy()
    AdamRule().update(rows, grad, state, 0.01, step)
    m, v = 0.1 * grad, 0.001 * (grad * grad)
    want -= 0.01 / (1 - 0.9 ** step) * m / (np.sqrt(v) / (1 - 0.999 ** step) ** 0.5 + 1e-8)
    np.testing.assert_allclose(rows, want, rtol=1e-6)


def test_a_subclass_that_changes_the_math_keeps_its_own_update():
    """The kernels follow AdagradRule's and AdamRule's own math; a subclass's override must not be bypassed."""
    class Halved(AdagradRule):
        def squares(self, g):
            return 0.5 * g * g

    rng = np.random.default_rng(3)
    w, grad = (rng.standard_normal(100).astype(np.float32) for _ in range(2))
    got = w.copy()
    Halved().update(got, grad, {"sum": np.zeros_like(w)}, 0.1, 1)
    acc = 0.5 * grad * grad
    np.testing.assert_array_equal(got, w - 0.1 * grad / (np.sqrt(acc) + 1e-10))
