"""Optimizer: applies an UpdateRule to named parameters at a learning rate that may follow a schedule.

Parameters come as an iterable of Tensors (named "0", "1", ... by position), a dict ``{name: Tensor}``, or an
iterable of ``(name, Tensor)`` pairs. State is kept per name: the rule's arrays and the parameter's own update
count, which advances only on the steps where the parameter had a gradient.

The optimizer holds its parameters in one flat buffer per dtype and device, each Tensor's ``data`` a view of it,
and its rule's state beside it (``flat.py``), so a step whose parameters all have gradients runs an elementwise
rule once for all of them rather than once per parameter: a fixed number of calls, however many layers.
"""
import numbers

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import get_array_module, to_host

from gpuemb.autograd.checks import check
from gpuemb.autograd.registry import Registry

from .flat import flat_groups
from .schedules import ConstantLR, Schedule


def named_parameters(params, owner):
    """The parameters as an ordered ``{name: Tensor}``, checked: not empty, Tensors only, no repeats."""
    items = list(params.items() if isinstance(params, dict) else params)
    check(items, owner, "got no parameters to optimize")
    items = [(str(i), p) if isinstance(p, Tensor) else p for i, p in enumerate(items)]
    named, seen = {}, set()
    for item in items:
        check(isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Tensor), owner,
              f"{item!r} is not a Tensor or a (name, Tensor) pair; pass Tensors, a dict, or (name, Tensor) pairs")
        name, p = str(item[0]), item[1]
        check(name not in named, owner, f"the parameter name {name!r} is given twice")
        check(id(p) not in seen, owner, f"parameter {name!r} is the same Tensor as an earlier one; "
                                        "pass each Tensor once, or it would be updated twice a step")
        named[name] = p
        seen.add(id(p))
    return named


OPTIMIZERS = Registry("optimizer")


class Optimizer:
    """Updates every parameter that has a ``.grad`` with ``rule``, at ``lr``: a float or a Schedule. A subclass
    made with ``name=`` is in ``OPTIMIZERS``, the dense optimizers a run config may name."""

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            OPTIMIZERS.add(name, cls)

    def __init__(self, params, rule, lr):
        owner = type(self).__name__
        self.params = named_parameters(params, owner)
        if not isinstance(lr, Schedule):
            check(isinstance(lr, numbers.Real) and lr >= 0, owner, f"lr={lr!r}; use a float >= 0 or a Schedule")
            lr = ConstantLR(float(lr))
        self.rule, self.schedule = rule, lr
        self.step_count = 0  # optimizer steps taken: the schedule's input
        self.state, self.steps = {}, {}  # per parameter name (views of the groups' flat state), from the first update
        self.groups = flat_groups(self.params)

    @property
    def lr(self):
        """The learning rate the next ``step()`` uses."""
        return self.schedule(self.step_count)

    def step(self):
        """Update each parameter whose ``.grad`` is not None, then advance the schedule."""
        lr = self.lr
        for group in self.groups:
            names = [n for n in group.names if self.params[n].grad is not None]
            for name in names:
                p = self.params[name]
                check(tuple(p.grad.shape) == p.shape, type(self).__name__,
                      f"parameter {name!r} has shape {p.shape} but its grad has shape {tuple(p.grad.shape)}")
                if name not in self.state:  # its views of the group's flat state, which is made once
                    self.state[name], self.steps[name] = self._new_state(group, name), 0
                self.steps[name] += 1
            counts = {self.steps[n] for n in names}
            if self.rule.elementwise and len(names) == len(group.names) and len(counts) == 1:
                grad = group.gradient([self.params[n].grad for n in names])
                self.rule.update(group.data, grad, group.state, lr, counts.pop())
                continue
            for name in names:  # some parameters have no gradient, or another count: one at a time, on the views
                p = self.params[name]
                self.rule.update(p.data, p.grad, self.state[name], lr, self.steps[name])
        self.step_count += 1

    def _new_state(self, group, name):
        """A parameter's rule state: views of its group's flat state, or its own where the rule is not
        elementwise (its state need not be shaped as the parameter: row-wise Adagrad keeps one sum a row)."""
        if self.rule.elementwise:
            return group.state_of(self.rule)[name]
        return self.rule.init_state(self.params[name].data)

    def zero_grad(self):
        """Drop every parameter's gradient (set it to None)."""
        for p in self.params.values():
            p.grad = None

    def state_dict(self):
        """Settings, step counts and per-parameter state as plain Python values and host NumPy copies."""
        params = {name: {"step": self.steps[name], **{k: to_host(a).copy() for k, a in arrays.items()}}
                  for name, arrays in self.state.items()}
        return {"rule": self.rule.state_dict(), "schedule": self.schedule.state_dict(),
                "step_count": self.step_count, "params": params}

    def load_state_dict(self, state):
        """Restore what ``state_dict()`` saved, on each parameter's device.

        The rule and schedule settings must match this optimizer's (leave ``"rule"`` or ``"schedule"`` out of
        ``state`` to keep this optimizer's own). Raises KeyError or ValueError naming any parameter that does not
        fit; nothing is changed then.
        """
        owner = type(self).__name__
        for key, settings in (("rule", self.rule), ("schedule", self.schedule)):
            if key in state:
                settings.load_state_dict(state[key])
        loaded, steps = {}, {}
        for name, saved in state["params"].items():
            if name not in self.params:
                raise KeyError(f"{owner}: the saved state has parameter {name!r}, which this optimizer does not "
                               f"have (it has {', '.join(map(repr, self.params))})")
            p = self.params[name]
            names = sorted(k for k in saved if k != "step")
            check(names == sorted(self.rule.state_names), owner, f"parameter {name!r}: the saved state holds "
                  f"{names}, but {type(self.rule).__name__} keeps {sorted(self.rule.state_names)}")
            for k in names:
                check(tuple(saved[k].shape) == p.shape, owner, f"parameter {name!r}: saved {k!r} has shape "
                      f"{tuple(saved[k].shape)}, the parameter has shape {p.shape}")
            xp = get_array_module(p.data)
            loaded[name] = {k: xp.asarray(saved[k], dtype=p.dtype) for k in names}
            steps[name] = int(saved["step"])
        if not self.rule.elementwise:
            self.state, self.steps, self.step_count = loaded, steps, int(state["step_count"])
            return
        for group in self.groups:  # into the flat state's views, each a copy: updates must not edit `state`
            if any(name in loaded for name in group.names):
                views = group.state_of(self.rule)
                for name in group.names:
                    for k, view in views[name].items():
                        view[...] = loaded[name][k] if name in loaded else 0
        self.state = {name: views for group in self.groups for name, views in group.state_of(self.rule).items()
                      if name in loaded} if loaded else {}
        self.steps, self.step_count = steps, int(state["step_count"])
