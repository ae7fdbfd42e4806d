"""Losses: binary cross-entropy on logits, and mean squared error."""
from ..backend import get_array_module
from ..function import Function, ShapeError
from .broadcast import shape_of

REDUCTIONS = ("mean", "sum", "none")


class _Loss(Function):
    def __init__(self, reduction="mean"):
        if reduction not in REDUCTIONS:
            raise ValueError(f"{self.name}: reduction={reduction!r}; use one of {', '.join(REDUCTIONS)}")
        self.reduction = reduction

    def check(self, a, b):
        if shape_of(a) != shape_of(b):
            raise ShapeError(f"{self.name}: prediction of shape {shape_of(a)} and target of shape {shape_of(b)} differ")

    def reduce(self, elementwise):
        if self.reduction == "none":
            return elementwise
        total = elementwise.sum()
        return total / elementwise.size if self.reduction == "mean" else total

    def scale(self, gy, n):
        """The upstream gradient spread over the elements, as the reduction took them in."""
        return gy / n if self.reduction == "mean" else gy


class BCEWithLogits(_Loss):
    """``-(t·log σ(x) + (1−t)·log(1−σ(x)))`` written as ``max(x,0) − x·t + log1p(exp(−|x|))``,
    which is finite for any logit. Targets are constants (in [0, 1]) and get no gradient."""

    def forward(self, x, t):
        self.check(x, t)
        xp = get_array_module(x)
        self.x, self.t = x, t
        return self.reduce(xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x))))

    def backward(self, gy):
        xp = get_array_module(gy)
        p = xp.exp(-xp.logaddexp(0, -self.x))
        return self.scale(gy, self.x.size) * (p - self.t), None


class MSE(_Loss):
    def forward(self, p, t):
        self.check(p, t)
        self.diff = p - t
        return self.reduce(self.diff * self.diff)

    def backward(self, gy):
        g = self.scale(gy, self.diff.size) * 2 * self.diff
        return g, -g


def bce_with_logits(logits, targets, reduction="mean"):
    return BCEWithLogits(reduction).apply(logits, targets)


def mse(prediction, target, reduction="mean"):
    return MSE(reduction).apply(prediction, target)
