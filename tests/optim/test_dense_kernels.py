"""The one-pass dense kernels (optim/dense_kernels.py) give the very bits of their rule's NumPy update."""
import numpy as np
import pytest

from optim import dense_kernels
from optim.adagrad import AdagradRule


def numpy_adagrad(w, grad, acc, lr, eps, decay):
    """The rule's math, written out in NumPy as the module docstring of optim/adagrad.py states it."""
    g = grad + decay * w if decay else grad
    acc += g * g
    w -= lr * g / (np.sqrt(acc) + eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 17, 100_003])
@pytest.mark.parametrize("decay", [0.0, 0.01])
def test_adagrad_matches_numpy_bit_for_bit_over_several_steps(dtype, size, decay):
    rng = np.random.default_rng(size)
    rule = AdagradRule(initial_accumulator_value=0.1, eps=1e-6, weight_decay=decay)
    w = rng.standard_normal(size).astype(dtype)
    ref_w, state = w.copy(), rule.init_state(w)
    ref_acc = state["sum"].copy()
    for step in range(1, 4):
        grad = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 2)).astype(dtype)
        rule.update(w, grad, state, 0.05, step)
        numpy_adagrad(ref_w, grad, ref_acc, 0.05, 1e-6, decay)
    assert dense_kernels.fusable(0.05, w, grad, state["sum"])
    np.testing.assert_array_equal(w, ref_w)
    np.testing.assert_array_equal(state["sum"], ref_acc)
    assert not np.array_equal(w, rng.standard_normal(size).astype(dtype))  # it moved from where it began


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
    numpy_adagrad(ref_w, grad, ref_acc, 0.1, 1e-10, 0.0)
    np.testing.assert_array_equal(w, ref_w)
    np.testing.assert_array_equal(acc, ref_acc)
