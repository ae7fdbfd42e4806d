"""FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches", KDD 2013, Algorithm 1).

Per coordinate, with ``lr`` the paper's alpha and ``p = -lr_power`` (1/2 in the paper):
``g = grad + weight_decay·w``; ``z += g - ((n + g²)^p - n^p) / lr · w``; ``n += g²``; then
``w = 0`` where ``|z| <= l1``, else ``w = -(z - sign(z)·l1) / ((beta + n^p) / lr + l2)``.
``l2`` is the paper's lambda2 (MXNet's convention; TensorFlow's doubles it). The weights are a function of
``z`` and ``n``, so L1 makes them exactly zero, not just small. Needs ``lr > 0``.
With ``l1 = l2 = 0`` and weights starting at zero it is Adagrad with ``eps = beta``.
"""
import math
from dataclasses import dataclass

from gpuemb.autograd.backend import get_array_module

from .rule import UpdateRule


@dataclass(frozen=True)
class FtrlRule(UpdateRule, name="ftrl"):
    """The FTRL-Proximal update of one parameter (or of rows); see the module docstring."""

    l1: float = 0.0
    l2: float = 0.0
    beta: float = 1.0
    lr_power: float = -0.5
    weight_decay: float = 0.0
    state_names = ("z", "n")

    def validate(self):
        self.check_real("l1")
        self.check_real("l2")
        self.check_real("beta", above_low=True)  # keeps the denominator positive on a coordinate with n = 0
        self.check_real("lr_power", low=-math.inf, high=0.0)
        self.check_real("weight_decay")

    def fused_args(self):
        return "ftrl", (self.l1, self.l2, self.beta, -self.lr_power)

    def update(self, param, grad, state, lr, step):
        xp = get_array_module(param)
        p = -self.lr_power
        g = self.decayed(param, grad)
        z, n = state["z"], state["n"]
        sigma = -(n ** p)
        n += g * g
        sigma += n ** p
        z += g - sigma / lr * param
        shrunk = xp.sign(z) * self.l1 - z
        param[...] = xp.where(xp.abs(z) > self.l1, shrunk / ((self.beta + n ** p) / lr + self.l2), 0)
