"""The loss scaler: scaled backward, in-place unscaling once per array, skipping on inf/NaN, backoff and growth."""
import numpy as np
import pytest

from gpuemb import autograd as ag
from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGD, LossScaler


def setup(xp, rng, scaler):
    """One weight, an SGD optimizer, and a scaled backward of ``sum(w·x)``, whose true gradient is ``x``."""
    w = Tensor(xp.asarray(rng.standard_normal(5)), requires_grad=True)
    x = xp.asarray(rng.standard_normal(5))
    opt = SGD([w], lr=0.5)
    scaler.scale(ag.sum(w * x)).backward()
    return w, to_host(x), opt


def test_scale_goes_through_autograd_and_step_unscales(xp, rng):
    scaler = LossScaler(init_scale=1024.0)
    w, x, opt = setup(xp, rng, scaler)
    np.testing.assert_allclose(to_host(w.grad), 1024.0 * x, rtol=1e-15)
    w0 = to_host(w.data).copy()
    assert scaler.step(opt) is True
    np.testing.assert_allclose(to_host(w.grad), x, rtol=1e-15)
    np.testing.assert_allclose(to_host(w.data), w0 - 0.5 * x, rtol=1e-14)
    scaler.update()
    assert scaler.loss_scale == 1024.0 and scaler.growth_tracker == 1


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_grads_skip_the_step_and_back_off(xp, rng, bad):
    scaler = LossScaler(init_scale=2.0 ** 16)
    w, _, opt = setup(xp, rng, scaler)
    w.grad[2] = bad
    w0 = to_host(w.data).copy()
    assert scaler.step(opt) is False
    scaler.update()
    np.testing.assert_array_equal(to_host(w.data), w0)
    assert opt.step_count == 0 and scaler.steps_skipped == 1 and scaler.loss_scale == 2.0 ** 15


def test_scale_grows_after_the_interval_and_an_overflow_restarts_the_count(rng):
    scaler = LossScaler(init_scale=8.0, growth_factor=2.0, backoff_factor=0.25, growth_interval=3)
    w = Tensor(rng.standard_normal(4), requires_grad=True)
    opt = SGD([w], 0.1)
    scales = []
    for grad in [1.0, 1.0, 1.0, 1.0, 1.0, np.inf, 1.0, 1.0, 1.0]:
        w.grad = np.full(4, grad)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.loss_scale)
    assert scales == [8.0, 8.0, 16.0, 16.0, 16.0, 4.0, 4.0, 4.0, 8.0]


def test_static_scaler_never_moves_but_still_skips_and_warns(rng):
    scaler = LossScaler.static(128.0)
    w = Tensor(rng.standard_normal(3), requires_grad=True)
    opt = SGD([w], 0.1)
    assert not scaler.dynamic
    w.grad = np.array([1.0, np.nan, 2.0])
    with pytest.warns(RuntimeWarning, match="static scale 128.0"):
        assert scaler.step(opt) is False
    scaler.update()
    for _ in range(5):
        w.grad = np.ones(3)
        assert scaler.step(opt) is True
        scaler.update()
    assert scaler.loss_scale == 128.0 and scaler.steps_skipped == 1 and opt.step_count == 5


def test_an_array_shared_by_two_grads_is_unscaled_once(rng):
    scaler = LossScaler(init_scale=4.0)
    a, b = Tensor(rng.standard_normal(3), requires_grad=True), Tensor(rng.standard_normal(3), requires_grad=True)
    g = rng.standard_normal(3)
    a.grad = b.grad = g.copy()
    assert scaler.unscale_(SGD([a, b], 0.1)) is True
    np.testing.assert_allclose(a.grad, g / 4.0, rtol=1e-15)
    assert b.grad is a.grad


def test_a_non_finite_array_outside_the_optimizer_skips_its_step_too(rng):
    scaler = LossScaler(init_scale=8.0)
    w, _, opt = setup(np, rng, scaler)
    held = np.array([16.0, np.inf])  # e.g. an embedding table's row gradients, held until the step
    assert scaler.unscale_arrays_([held]) is False and held[0] == 2.0
    w0 = w.data.copy()
    assert scaler.step(opt) is False
    scaler.update()
    np.testing.assert_array_equal(w.data, w0)
    assert scaler.loss_scale == 4.0 and scaler.steps_skipped == 1


def test_unscale_then_step_does_not_unscale_again(rng):
    scaler = LossScaler(init_scale=16.0)
    w, x, opt = setup(np, rng, scaler)
    scaler.unscale_(opt)
    w0 = w.data.copy()
    scaler.step(opt)
    np.testing.assert_allclose(w.data, w0 - 0.5 * x, rtol=1e-14)


@pytest.mark.parametrize("calls, match", [
    (lambda s, o: (s.unscale_(o), s.unscale_(o)), "already unscaled"),
    (lambda s, o: (s.step(o), s.step(o)), "already called"),
    (lambda s, o: (s.step(o), s.update(), s.update()), "no gradients were checked"),
])
def test_misuse_in_one_iteration_raises(rng, calls, match):
    scaler = LossScaler()
    _, _, opt = setup(np, rng, scaler)
    with pytest.raises(RuntimeError, match=match):
        calls(scaler, opt)


def test_state_dict_round_trip_and_settings_check(rng):
    scaler = LossScaler(init_scale=64.0, growth_interval=5)
    w = Tensor(rng.standard_normal(2), requires_grad=True)
    opt = SGD([w], 0.1)
    for grad in [1.0, 1.0, 1.0, np.inf, 1.0]:
        w.grad = np.full(2, grad)
        scaler.step(opt)
        scaler.update()
    state = scaler.state_dict()
    other = LossScaler(init_scale=64.0, growth_interval=5)
    other.load_state_dict(state)
    assert (other.loss_scale, other.growth_tracker, other.steps_skipped) == (32.0, 1, 1)
    with pytest.raises(ValueError, match="growth_interval: saved 5, here 2000"):
        LossScaler().load_state_dict(state)


@pytest.mark.parametrize("kwargs, match", [
    (dict(init_scale=0.0), "init_scale=0.0"),
    (dict(growth_factor=0.5), "growth_factor=0.5"),
    (dict(backoff_factor=1.5), "backoff_factor=1.5"),
    (dict(backoff_factor=0.0), "backoff_factor=0.0"),
    (dict(growth_interval=0), "growth_interval=0"),
])
def test_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossScaler(**kwargs)


def test_scale_wants_a_tensor():
    with pytest.raises(TypeError, match="expected a Tensor, got float"):
        LossScaler().scale(1.0)
