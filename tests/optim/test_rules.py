"""Each optimizer against a textbook NumPy loop, and each rule on rows with per-row step counts (the store's use)."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGD, Adagrad, Adam, AdagradRule, AdamRule, AdamW, SGDRule, StepLR


def sgd_ref(w, grads, lrs, momentum=0.0, nesterov=False, weight_decay=0.0):
    v = np.zeros_like(w)
    for g, lr in zip(grads, lrs):
        if g is None:
            continue
        g = g + weight_decay * w
        v = momentum * v + g
        w = w - lr * (g + momentum * v if nesterov else v)
    return w


def adagrad_ref(w, grads, lrs, initial_accumulator_value=0.0, eps=1e-10, weight_decay=0.0):
    acc = np.full_like(w, initial_accumulator_value)
    for g, lr in zip(grads, lrs):
        if g is None:
            continue
        g = g + weight_decay * w
        acc = acc + g ** 2
        w = w - lr * g / (np.sqrt(acc) + eps)
    return w


def adam_ref(w, grads, lrs, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    (b1, b2), m, v, t = betas, np.zeros_like(w), np.zeros_like(w), 0
    for g, lr in zip(grads, lrs):
        if g is None:
            continue
        t += 1  # the bias correction counts this parameter's own updates, not the optimizer's steps
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
    return w


def adamw_ref(w, grads, lrs, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    return adam_ref(w, grads, lrs, betas, eps, weight_decay, decoupled=True)


CASES = [
    (SGD, sgd_ref, dict(lr=0.1)),
    (SGD, sgd_ref, dict(lr=0.1, weight_decay=0.2)),
    (SGD, sgd_ref, dict(lr=0.05, momentum=0.9)),
    (SGD, sgd_ref, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    (Adagrad, adagrad_ref, dict(lr=0.1)),
    (Adagrad, adagrad_ref, dict(lr=0.2, initial_accumulator_value=0.5, eps=1e-6, weight_decay=0.05)),
    (Adam, adam_ref, dict(lr=0.01)),
    (Adam, adam_ref, dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (AdamW, adamw_ref, dict(lr=0.01)),
    (AdamW, adamw_ref, dict(lr=0.03, betas=(0.5, 0.9), eps=1e-7, weight_decay=0.3)),
]


@pytest.mark.parametrize("schedule", [False, True], ids=["constant", "step_lr"])
@pytest.mark.parametrize("cls, ref, kwargs", CASES, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_optimizer_matches_numpy_loop(xp, rng, cls, ref, kwargs, schedule):
    steps = 6
    lrs = [kwargs["lr"] * 0.5 ** (k // 2) for k in range(steps)] if schedule else [kwargs["lr"]] * steps
    kwargs = {**kwargs, "lr": StepLR(kwargs["lr"], step_size=2, gamma=0.5)} if schedule else kwargs
    w0, b0 = rng.standard_normal((4, 3)), rng.standard_normal(3)
    w_grads = [rng.standard_normal((4, 3)) for _ in range(steps)]
    b_grads = [rng.standard_normal(3) if k % 2 else None for k in range(steps)]  # b misses every other step
    w, b = Tensor(xp.array(w0), requires_grad=True), Tensor(xp.array(b0), requires_grad=True)  # copies: w0 stays
    opt = cls({"w": w, "b": b}, **kwargs)
    for gw, gb in zip(w_grads, b_grads):
        w.grad, b.grad = xp.asarray(gw), None if gb is None else xp.asarray(gb)
        opt.step()
    settings = {k: v for k, v in kwargs.items() if k != "lr"}
    np.testing.assert_allclose(to_host(w.data), ref(w0, w_grads, lrs, **settings), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(to_host(b.data), ref(b0, b_grads, lrs, **settings), rtol=1e-12, atol=1e-14)
    assert opt.steps == {"w": steps, "b": steps // 2}


RULES = [SGDRule(), SGDRule(momentum=0.9, nesterov=True, weight_decay=0.01), AdagradRule(0.1, weight_decay=0.01),
         AdamRule(), AdamRule(betas=(0.8, 0.99), weight_decay=0.05, decoupled=True)]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_with_per_row_steps_match_row_by_row(xp, rng, rule, dtype):
    n, D = 5, 4
    rows = rng.standard_normal((n, D)).astype(dtype)
    grads = rng.standard_normal((n, D)).astype(dtype)
    state = {k: rng.random((n, D)).astype(dtype) for k in rule.state_names}  # >= 0, valid for sums of squares
    steps, lrs = np.array([[1], [3], [7], [2], [40]]), rng.uniform(0.01, 0.1, (n, 1))

    batch_rows, batch_state = xp.array(rows), {k: xp.array(a) for k, a in state.items()}  # copies
    rule.update(batch_rows, xp.asarray(grads), batch_state, xp.asarray(lrs), xp.asarray(steps))
    for i in range(n):
        row_state = {k: a[i].copy() for k, a in state.items()}
        rule.update(rows[i], grads[i], row_state, float(lrs[i, 0]), int(steps[i, 0]))
        for k in state:
            state[k][i] = row_state[k]
    tol = 1e-12 if dtype == np.float64 else 1e-6
    assert batch_rows.dtype == dtype and all(a.dtype == dtype for a in batch_state.values())
    np.testing.assert_allclose(to_host(batch_rows), rows, rtol=tol, atol=tol)
    for k in state:
        np.testing.assert_allclose(to_host(batch_state[k]), state[k], rtol=tol, atol=tol)


def test_init_state_shapes_and_values(xp, rng):
    param = xp.asarray(rng.standard_normal((3, 2)))
    assert SGDRule().init_state(param) == {}
    assert set(SGDRule(momentum=0.5).init_state(param)) == {"momentum_buffer"}
    acc = AdagradRule(initial_accumulator_value=0.25).init_state(param)["sum"]
    np.testing.assert_array_equal(to_host(acc), np.full((3, 2), 0.25))
    adam = AdamRule().init_state(param)
    assert list(adam) == ["exp_avg", "exp_avg_sq"] and all(a.shape == (3, 2) for a in adam.values())
    assert AdamRule.needs_step and not SGDRule.needs_step and not AdagradRule.needs_step
