"""The dense optimizer's flat buffer: parameters as views of one array, stepped by one rule call, bit for bit as one
parameter at a time."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend
from gpuemb.autograd.backend import to_host
from gpuemb.optim import SGD, Adagrad, Adam, AdamRule, AdamW, RowwiseAdagradRule
from gpuemb.optim.optimizer import Optimizer

SHAPES = [(5, 3), (3,), (4, 5), (4,), (1, 4), (1,)]


def params(xp, rng):
    return [Tensor(xp.asarray(rng.standard_normal(s).astype(np.float32)), requires_grad=True) for s in SHAPES]


def per_parameter(opt_class, values, grads, steps, **kw):
    """The reference: an optimizer of each parameter alone (a group of one), stepped ``steps`` times."""
    out = []
    for v, g in zip(values, grads):
        p = Tensor(v.copy(), requires_grad=True)
        opt = opt_class([p], **kw)
        for s in range(steps):
            p.grad = g[s]
            opt.step()
        out.append(to_host(p.data))
    return out


@pytest.mark.parametrize("make, kw", [(SGD, {"lr": 0.1, "momentum": 0.9}), (Adagrad, {"lr": 0.1}),
                                      (Adam, {"lr": 0.01, "weight_decay": 0.01}), (AdamW, {"lr": 0.01})])
def test_a_flat_step_is_bit_for_bit_the_step_of_each_parameter(make, kw, xp, rng):
    ps = params(xp, rng)
    values = [p.data.copy() for p in ps]
    grads = [[xp.asarray(rng.standard_normal(s).astype(np.float32)) for _ in range(3)] for s in SHAPES]
    opt = make(ps, **kw)
    assert len(opt.groups) == 1 and opt.groups[0].data.size == sum(int(np.prod(s)) for s in SHAPES)
    for s in range(3):
        for p, g in zip(ps, grads):
            p.grad = g[s]
        opt.step()
    for p, want in zip(ps, per_parameter(make, values, grads, 3, **kw)):
        np.testing.assert_array_equal(to_host(p.data), want)


def test_parameters_become_views_of_one_buffer_and_keep_their_values(xp, rng):
    ps = params(xp, rng)
    before = [to_host(p.data).copy() for p in ps]
    opt = SGD(ps, 0.1)
    group = opt.groups[0]
    for p, b in zip(ps, before):
        np.testing.assert_array_equal(to_host(p.data), b)
        assert p.data.base is not None and p.data.shape == b.shape
    ps[2].data[...] = 7  # an in-place write (a checkpoint's load) lands in the buffer
    assert (to_host(group.data[group.bounds[2]:group.bounds[3]]) == 7).all()


def test_a_parameter_without_a_gradient_keeps_its_value_and_the_others_step_alone(xp, rng):
    ps = params(xp, rng)
    opt = Adam(ps, lr=0.1)
    frozen = to_host(ps[1].data).copy()
    for p in ps:
        p.grad = xp.ones(p.shape, np.float32)
    ps[1].grad = None
    opt.step()
    np.testing.assert_array_equal(to_host(ps[1].data), frozen)
    assert opt.steps == {str(i): 1 for i in range(len(ps)) if i != 1}
    for p in ps:  # now every one has a gradient, but their counts differ: one at a time, still right
        p.grad = xp.ones(p.shape, np.float32)
    opt.step()
    assert opt.steps["1"] == 1 and opt.steps["0"] == 2


def test_state_saves_and_loads_into_the_flat_state(xp, rng):
    ps, qs = params(xp, rng), params(xp, rng)
    opt, other = Adam(ps, lr=0.01), Adam(qs, lr=0.01)
    for q, p in zip(qs, ps):
        q.data[...] = p.data
    for _ in range(2):
        for p in ps:
            p.grad = xp.asarray(rng.standard_normal(p.shape).astype(np.float32))
        opt.step()
    other.load_state_dict(opt.state_dict())
    for q, p in zip(qs, ps):
        q.data[...] = p.data
        q.grad = p.grad = xp.asarray(rng.standard_normal(p.shape).astype(np.float32))
    opt.step()
    other.step()
    for q, p in zip(qs, ps):
        np.testing.assert_array_equal(to_host(q.data), to_host(p.data))
    assert other.state["0"]["exp_avg"].base is not None  # a view of the flat state


def test_a_rule_that_is_not_elementwise_steps_each_parameter_alone(rng):
    ps = [Tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True) for _ in range(2)]
    want = [p.data.copy() for p in ps]
    rule = RowwiseAdagradRule()
    opt = Optimizer(ps, rule, 0.1)
    grads = [rng.standard_normal((3, 4)).astype(np.float32) for _ in ps]
    for p, g, w in zip(ps, grads, want):
        p.grad = g
        rule.update(w, g, rule.init_state(w), 0.1, 1)
    opt.step()
    for p, w in zip(ps, want):
        np.testing.assert_array_equal(p.data, w)


@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="counts the emulated device's calls; a real GPU counts reads back only")
def test_a_step_costs_the_same_calls_for_any_number_of_parameters(rng):
    from gpuemb.autograd import launches

    def calls(n):
        ps = [Tensor(backend.xp.asarray(rng.standard_normal((4, 4)).astype(np.float32)), requires_grad=True)
              for _ in range(n)]
        opt = Optimizer(ps, AdamRule(), 0.01)
        for p in ps:
            p.grad = backend.xp.ones((4, 4), np.float32)
        opt.step()  # makes the state
        before = launches.COUNTS.snapshot(this_thread=True)
        opt.step()
        return launches.COUNTS.since(before, this_thread=True)

    few, many = calls(3), calls(12)
    assert few == many and 0 < many["cupy"] <= 16 and many["readbacks"] == 0  # Adam's calls, one concatenate
