"""RowwiseAdagradRule against its formula, written weight by weight, and against torch's Adagrad at D = 1."""
import math

import numpy as np
import pytest

from gpuemb.optim import RowwiseAdagradRule


def rowwise_adagrad_loop(w, grads, lr, initial_accumulator_value=0.0, eps=1e-10, weight_decay=0.0):
    """``acc += mean over the row of (g + wd·w)²``, then each weight steps by ``lr·g / (sqrt(acc) + eps)``."""
    w, acc = w.tolist(), [initial_accumulator_value] * len(w)
    for grad in grads:
        for i, row in enumerate(w):
            g = [grad[i][d] + weight_decay * row[d] for d in range(len(row))]
            acc[i] += sum(x * x for x in g) / len(row)
            w[i] = [row[d] - lr * g[d] / (math.sqrt(acc[i]) + eps) for d in range(len(row))]
    return np.array(w), np.array(acc)[:, None]


def run_rule(rule, w, grads, lr):
    w = w.copy()
    state = rule.init_state(w)
    for g in grads:
        rule.update(w, g, state, lr, None)
    return w, state["sum"]


@pytest.mark.parametrize("settings", [{}, dict(initial_accumulator_value=0.3, eps=1e-6, weight_decay=0.1)])
def test_rule_matches_the_formula(rng, settings):
    w0, grads = rng.standard_normal((5, 7)), [rng.standard_normal((5, 7)) for _ in range(5)]
    w, acc = run_rule(RowwiseAdagradRule(**settings), w0, grads, 0.1)
    want_w, want_acc = rowwise_adagrad_loop(w0, grads, 0.1, **settings)
    assert acc.shape == (5, 1)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-12)
    np.testing.assert_allclose(w, want_w, rtol=1e-12, atol=1e-14)


def test_state_is_one_accumulator_per_row():
    rule = RowwiseAdagradRule(initial_accumulator_value=0.5)
    assert rule.init_state(np.ones((4, 6)))["sum"].shape == (4, 1)
    np.testing.assert_array_equal(rule.init_state(np.ones(6, np.float32))["sum"], np.array([0.5], np.float32))


def test_at_width_one_it_is_torch_adagrad(rng):
    torch = pytest.importorskip("torch")
    settings = dict(lr=0.2, initial_accumulator_value=0.1, eps=1e-8, weight_decay=0.05)
    w0, grads = rng.standard_normal((6, 1)), [rng.standard_normal((6, 1)) for _ in range(5)]
    p = torch.tensor(w0, requires_grad=True)
    opt = torch.optim.Adagrad([p], **settings)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    lr = settings.pop("lr")
    w, _ = run_rule(RowwiseAdagradRule(**settings), w0, grads, lr)
    np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-12, atol=1e-14)
