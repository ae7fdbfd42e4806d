"""Adam and AdamW with bias correction (the updates of torch.optim.Adam and AdamW).

With ``t`` the step (1 on the first update; an array ``[n, 1]`` for rows):
``m = b1·m + (1-b1)·g``, ``v = b2·v + (1-b2)·g²``, ``w -= lr/(1-b1**t) · m / (sqrt(v)/sqrt(1-b2**t) + eps)``.
Adam's weight decay is L2 folded into ``g``; AdamW's is decoupled from it: ``w -= lr·weight_decay·w`` first.
"""
from dataclasses import dataclass

from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.checks import check

from . import dense_kernels
from .dense_kernels import fusable
from .optimizer import Optimizer
from .rule import UpdateRule


@dataclass(frozen=True)
class AdamRule(UpdateRule, name="adam"):
    """The Adam update of one parameter (or of rows); ``decoupled=True`` makes it AdamW."""

    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    state_names = ("exp_avg", "exp_avg_sq")
    needs_step = True

    def validate(self):
        name = type(self).__name__
        check(len(self.betas) == 2, name, f"betas={self.betas!r}; give two coefficients (beta1, beta2)")
        for i, beta in enumerate(self.betas):
            check(0 <= beta < 1, name, f"betas[{i}]={beta!r}; each beta must be in [0, 1)")
        self.check_real("eps")
        self.check_real("weight_decay")

    def fused_args(self):
        return "adam", (*self.betas, self.eps, self.decoupled)

    def update(self, param, grad, state, lr, step):
        m, v = state["exp_avg"], state["exp_avg_sq"]
        # one pass, the same bits (dense_kernels.py); a subclass may change the math (decayed), which it would not
        if type(self) is AdamRule and type(step) is int and fusable(lr, param, grad, m, v):
            return dense_kernels.adam(param, grad, m, v, lr, step, self.betas, self.eps, self.weight_decay,
                                      self.decoupled)
        xp = get_array_module(param)
        b1, b2 = self.betas
        if self.decoupled and self.weight_decay:
            param *= 1 - lr * self.weight_decay
        g = grad if self.decoupled else self.decayed(param, grad)
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * (g * g)
        denom = xp.sqrt(v) / (1 - b2 ** step) ** 0.5 + self.eps
        param -= lr / (1 - b1 ** step) * m / denom


class Adam(Optimizer, name="adam"):
    """Adam with L2 weight decay added to the gradient; ``lr`` is a float or a Schedule."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, AdamRule(tuple(betas), eps, weight_decay), lr)


class AdamW(Optimizer, name="adamw"):
    """Adam with decoupled weight decay (``w -= lr·weight_decay·w``); ``lr`` is a float or a Schedule."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, AdamRule(tuple(betas), eps, weight_decay, decoupled=True), lr)
