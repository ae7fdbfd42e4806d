"""FtrlRule against the paper's per-coordinate loop, and against torch's Adagrad, which it becomes without L1/L2."""
import math

import numpy as np
import pytest

from gpuemb.optim import FtrlRule


def ftrl_loop(w, grads, lr, l1=0.0, l2=0.0, beta=1.0, lr_power=-0.5, weight_decay=0.0):
    """McMahan et al. 2013, Algorithm 1, one coordinate at a time in Python floats."""
    w, p = w.ravel().tolist(), -lr_power
    z, n = [0.0] * len(w), [0.0] * len(w)
    for grad in grads:
        for i, gi in enumerate(grad.ravel().tolist()):
            g = gi + weight_decay * w[i]
            sigma = ((n[i] + g * g) ** p - n[i] ** p) / lr
            z[i] += g - sigma * w[i]
            n[i] += g * g
            if abs(z[i]) <= l1:
                w[i] = 0.0
            else:
                w[i] = -(z[i] - math.copysign(l1, z[i])) / ((beta + n[i] ** p) / lr + l2)
    return np.array(w), np.array(z), np.array(n)


def run_rule(rule, w, grads, lr):
    w = w.copy()
    state = rule.init_state(w)
    for g in grads:
        rule.update(w, g, state, lr, None)
    return w, state


SETTINGS = [
    dict(l1=0.0, l2=0.0),
    dict(l1=1.5, l2=0.3, beta=0.5),  # l1 large enough to zero some weights
    dict(l1=0.1, l2=0.01, beta=2.0, lr_power=-0.7, weight_decay=0.05),
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_rule_matches_the_paper(rng, settings):
    w0, grads = rng.standard_normal((4, 6)), [rng.standard_normal((4, 6)) for _ in range(6)]
    w, state = run_rule(FtrlRule(**settings), w0, grads, 0.3)
    want_w, want_z, want_n = ftrl_loop(w0, grads, 0.3, **settings)
    np.testing.assert_allclose(state["z"].ravel(), want_z, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(state["n"].ravel(), want_n, rtol=1e-12)
    np.testing.assert_allclose(w.ravel(), want_w, rtol=1e-12, atol=1e-14)
    assert (w != 0).any()
    if settings["l1"] >= 1:
        assert (w == 0).any() and ((w == 0) == (np.abs(state["z"]) <= settings["l1"])).all()


def test_without_l1_and_l2_it_is_torch_adagrad_with_eps_beta(rng):
    torch = pytest.importorskip("torch")
    grads = [rng.standard_normal((5, 3)) for _ in range(6)]
    p = torch.zeros((5, 3), dtype=torch.float64, requires_grad=True)  # the identity needs weights starting at 0
    opt = torch.optim.Adagrad([p], lr=0.2, eps=0.3)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    w, _ = run_rule(FtrlRule(beta=0.3), np.zeros((5, 3)), grads, 0.2)
    assert np.abs(w).min() > 0
    np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("settings, field", [(dict(beta=0.0), "beta"), (dict(lr_power=0.5), "lr_power"),
                                             (dict(l1=-1.0), "l1"), (dict(l2=math.nan), "l2")])
def test_bad_settings_are_refused(settings, field):
    with pytest.raises(ValueError, match=f"FtrlRule: {field}="):
        FtrlRule(**settings)
