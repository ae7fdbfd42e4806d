"""Optimizer state_dict: a resumed run continues bit for bit, and a state that does not fit is refused by name."""
import copy

import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGD, Adagrad, Adam, AdamW, WarmupPolyDecayLR

SCHEDULE = WarmupPolyDecayLR(0.05, warmup_steps=2, decay_start=4, decay_steps=4)
MAKERS = {
    "sgd": lambda p: SGD(p, SCHEDULE, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adagrad": lambda p: Adagrad(p, SCHEDULE, initial_accumulator_value=0.1),
    "adam": lambda p: Adam(p, SCHEDULE, weight_decay=0.01),
    "adamw": lambda p: AdamW(p, SCHEDULE),
}


def params(xp, values):
    return {name: Tensor(xp.array(v), requires_grad=True) for name, v in values.items()}


def run(opt, grads, xp):
    for step_grads in grads:
        for name, p in opt.params.items():
            g = step_grads.get(name)
            p.grad = None if g is None else xp.asarray(g)
        opt.step()


@pytest.mark.parametrize("kind", MAKERS)
def test_resumed_run_matches_uninterrupted_bit_for_bit(xp, rng, kind):
    values = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    grads = [{"w": rng.standard_normal((3, 4)), **({"b": rng.standard_normal(4)} if k != 1 else {})}
             for k in range(8)]
    first = params(xp, values)
    opt = MAKERS[kind](first)
    run(opt, grads[:3], xp)
    saved = opt.state_dict()
    at_save = {name: to_host(p.data).copy() for name, p in first.items()}
    run(opt, grads[3:], xp)  # the saved state must be a snapshot: these steps must not reach it

    assert saved["step_count"] == 3 and saved["params"]["b"]["step"] == 2
    assert all(isinstance(a, np.ndarray) for s in saved["params"].values() for k, a in s.items() if k != "step")
    resumed = params(xp, at_save)
    opt2 = MAKERS[kind](resumed)
    kept = copy.deepcopy(saved)
    opt2.load_state_dict(saved)
    run(opt2, grads[3:], xp)
    for name in values:
        np.testing.assert_array_equal(to_host(resumed[name].data), to_host(first[name].data))
        for k, a in saved["params"][name].items():  # loading copies: the resumed steps leave `saved` as it was
            np.testing.assert_array_equal(a, kept["params"][name][k])
    assert opt2.state_dict()["step_count"] == opt.step_count == 8


def saved_adam_state(rng, **kwargs):
    p = params(np, {"w": rng.standard_normal((2, 3))})
    opt = Adam(p, 0.01, **kwargs)
    p["w"].grad = rng.standard_normal((2, 3))
    opt.step()
    return opt.state_dict()


def test_unknown_parameter_name_is_refused(rng):
    opt = Adam(params(np, {"weight": rng.standard_normal((2, 3))}), 0.01)
    with pytest.raises(KeyError, match="parameter 'w', which this optimizer does not have.*'weight'"):
        opt.load_state_dict(saved_adam_state(rng))


def test_wrong_shape_is_refused_and_nothing_changes(rng):
    opt = Adam(params(np, {"w": rng.standard_normal((3, 2))}), 0.01)
    with pytest.raises(ValueError, match=r"'w': saved 'exp_avg' has shape \(2, 3\), the parameter has shape \(3, 2\)"):
        opt.load_state_dict(saved_adam_state(rng))
    assert opt.state == {} and opt.step_count == 0


def test_other_hyperparameters_are_refused_unless_left_out(rng):
    opt = Adam(params(np, {"w": rng.standard_normal((2, 3))}), 0.01, betas=(0.8, 0.999))
    saved = saved_adam_state(rng)
    with pytest.raises(ValueError, match=r"AdamRule: .*betas: saved \[0.9, 0.999\], here \[0.8, 0.999\]"):
        opt.load_state_dict(saved)
    opt.load_state_dict({k: v for k, v in saved.items() if k != "rule"})
    assert opt.steps == {"w": 1}


def test_state_of_another_rule_is_refused(rng):
    opt = SGD(params(np, {"w": rng.standard_normal((2, 3))}), 0.01, momentum=0.9)
    saved = {k: v for k, v in saved_adam_state(rng).items() if k != "rule"}
    with pytest.raises(ValueError, match=r"'w': the saved state holds \['exp_avg', 'exp_avg_sq'\]"):
        opt.load_state_dict(saved)


def test_other_schedule_is_refused(rng):
    opt = Adam(params(np, {"w": rng.standard_normal((2, 3))}), 0.02)
    with pytest.raises(ValueError, match="ConstantLR: .*lr: saved 0.01, here 0.02"):
        opt.load_state_dict(saved_adam_state(rng))
