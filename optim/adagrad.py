"""Adagrad (the update of torch.optim.Adagrad without lr_decay, which a schedule covers).

``g = grad + weight_decay·w``; ``sum += g²``; ``w -= lr·g / (sqrt(sum) + eps)``. The accumulator starts at
``initial_accumulator_value``.
"""
from dataclasses import dataclass

from gpuemb.autograd.backend import get_array_module

from . import dense_kernels
from .dense_kernels import fusable
from .optimizer import Optimizer
from .rule import UpdateRule


@dataclass(frozen=True)
class AdagradRule(UpdateRule, name="adagrad"):
    """The Adagrad update of one parameter (or of rows); see the module docstring."""

    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    weight_decay: float = 0.0
    state_names = ("sum",)

    def validate(self):
        self.check_real("initial_accumulator_value")
        self.check_real("eps")
        self.check_real("weight_decay")

    def fused_args(self):
        return "adagrad", (self.eps,)

    def init_state(self, param):
        return {"sum": get_array_module(param).full_like(param, self.initial_accumulator_value)}

    def update(self, param, grad, state, lr, step):
        acc = state["sum"]
        # one pass, the same bits (dense_kernels.py); a subclass may change the math (squares), which it would not
        if type(self) is AdagradRule and fusable(lr, param, grad, acc):
            return dense_kernels.adagrad(param, grad, acc, lr, self.eps, self.weight_decay)
        xp = get_array_module(param)
        g = self.decayed(param, grad)
        acc += self.squares(g)
        param -= lr * g / (xp.sqrt(acc) + self.eps)

    def squares(self, g):
        """What a step adds to the accumulator: ``g²``, one per weight."""
        return g * g


class Adagrad(Optimizer, name="adagrad"):
    """Adagrad; ``lr`` is a float or a Schedule."""

    def __init__(self, params, lr=1e-2, initial_accumulator_value=0.0, eps=1e-10, weight_decay=0.0):
        super().__init__(params, AdagradRule(initial_accumulator_value, eps, weight_decay), lr)
