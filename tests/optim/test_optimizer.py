"""The Optimizer shell: naming parameters, stepping, the schedule, convergence, and the errors it raises."""
import numpy as np
import pytest

from gpuemb import autograd as ag
from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGD, Adagrad, Adam, AdamW, CosineLR, StepLR, WarmupPolyDecayLR


def tensors(xp, rng, *shapes):
    return [Tensor(xp.asarray(rng.standard_normal(s)), requires_grad=True) for s in shapes]


def test_parameters_are_named_by_position_dict_or_pairs(xp, rng):
    a, b = tensors(xp, rng, 2, 3)
    assert list(SGD([a, b], 0.1).params) == ["0", "1"]
    assert SGD({"w": a, "b": b}, 0.1).params == {"w": a, "b": b}
    assert list(SGD(iter([("w", a), ("b", b)]), 0.1).params) == ["w", "b"]


@pytest.mark.parametrize("build, match", [
    (lambda a, b: [], "no parameters"),
    (lambda a, b: [a, np.zeros(3)], "array.* is not a Tensor"),
    (lambda a, b: [a, a], "'1' is the same Tensor as an earlier one"),
    (lambda a, b: [("w", a), ("w", b)], "'w' is given twice"),
])
def test_bad_parameter_lists_raise(rng, build, match):
    with pytest.raises(ValueError, match=match):
        SGD(build(*tensors(np, rng, 2, 2)), 0.1)


@pytest.mark.parametrize("make, match", [
    (lambda p: SGD(p, lr=-0.1), "lr=-0.1"),
    (lambda p: SGD(p, lr="fast"), "lr='fast'"),
    (lambda p: SGD(p, 0.1, momentum=-0.5), "momentum=-0.5"),
    (lambda p: SGD(p, 0.1, nesterov=True), "nesterov=True needs momentum"),
    (lambda p: SGD(p, 0.1, weight_decay=-1e-4), "weight_decay"),
    (lambda p: Adagrad(p, initial_accumulator_value=-1.0), "initial_accumulator_value"),
    (lambda p: Adagrad(p, eps=float("nan")), "eps=nan"),
    (lambda p: Adam(p, betas=(1.0, 0.999)), r"betas\[0\]=1.0"),
    (lambda p: Adam(p, betas=(0.9, -0.1)), r"betas\[1\]=-0.1"),
    (lambda p: Adam(p, betas=(0.9,)), "two coefficients"),
    (lambda p: AdamW(p, eps=-1e-8), "eps"),
    (lambda p: AdamW(p, weight_decay=-0.01), "weight_decay"),
])
def test_bad_hyperparameters_raise(rng, make, match):
    with pytest.raises(ValueError, match=match):
        make(tensors(np, rng, 3))


def test_step_skips_parameters_without_grad_and_zero_grad_clears(xp, rng):
    a, b = tensors(xp, rng, 3, 3)
    b_before = to_host(b.data).copy()
    opt = Adam([a, b], lr=0.1)
    a.grad = xp.asarray(rng.standard_normal(3))
    opt.step()
    np.testing.assert_array_equal(to_host(b.data), b_before)
    assert set(opt.state) == {"0"} and opt.step_count == 1
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_grad_of_the_wrong_shape_is_named(rng):
    (a,) = tensors(np, rng, (2, 3))
    a.grad = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"'0' has shape \(2, 3\) but its grad has shape \(3, 2\)"):
        SGD([a], 0.1).step()


def test_lr_follows_the_schedule_one_step_at_a_time(rng):
    (w,) = tensors(np, rng, 4)
    schedule = WarmupPolyDecayLR(0.4, warmup_steps=2, decay_start=3, decay_steps=2)
    opt = SGD([w], schedule)
    for k in range(6):
        assert opt.lr == schedule(k)
        before, w.grad = w.data.copy(), rng.standard_normal(4)
        opt.step()
        np.testing.assert_allclose(w.data, before - schedule(k) * w.grad, rtol=1e-15)


def least_squares(xp, rng):
    x = rng.standard_normal((64, 4))
    W_true, b_true = rng.standard_normal((2, 4)), rng.standard_normal(2)
    y = x @ W_true.T + b_true
    W, b = tensors(xp, rng, (2, 4), 2)
    return xp.asarray(x), xp.asarray(y), W, b, W_true, b_true


@pytest.mark.parametrize("make, steps", [
    (lambda p: SGD(p, 0.1), 300),
    (lambda p: SGD(p, 0.05, momentum=0.9, nesterov=True), 200),
    (lambda p: Adagrad(p, 0.5), 300),
    (lambda p: Adam(p, CosineLR(0.1, total_steps=400)), 400),
    (lambda p: AdamW(p, CosineLR(0.1, total_steps=400, warmup_steps=20), weight_decay=0.0), 400),
], ids=["sgd", "nesterov", "adagrad", "adam", "adamw"])
def test_converges_on_least_squares(xp, rng, make, steps):
    x, y, W, b, W_true, b_true = least_squares(xp, rng)
    opt = make([W, b])
    first = None
    for _ in range(steps):
        opt.zero_grad()
        loss = ag.mse(ag.linear(x, W, b), y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < 1e-6 * first
    np.testing.assert_allclose(to_host(W.data), W_true, atol=1e-3)
    np.testing.assert_allclose(to_host(b.data), b_true, atol=1e-3)


def test_adamw_decay_shrinks_weights_without_gradient_signal(rng):
    (w,) = tensors(np, rng, 5)
    w0 = w.data.copy()
    opt = AdamW([w], lr=StepLR(0.1, step_size=100), weight_decay=0.5)
    w.grad = np.zeros(5)  # with no gradient only the decoupled decay moves w: w·(1 - lr·wd) per step
    for _ in range(3):
        opt.step()
    np.testing.assert_allclose(w.data, w0 * (1 - 0.1 * 0.5) ** 3, rtol=1e-14)
