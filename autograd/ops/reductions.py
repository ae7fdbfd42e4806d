"""Sum and mean over axes, with keepdims."""
from ..backend import get_array_module
from ..function import Function
from .broadcast import normalize_axes


class Sum(Function):
    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.shape, self.axes = x.shape, normalize_axes(self.axis, x.ndim)
        return x.sum(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        xp = get_array_module(gy)
        if not self.keepdims:
            gy = gy.reshape([1 if i in self.axes else n for i, n in enumerate(self.shape)])
        return xp.broadcast_to(gy, self.shape).copy()


class Mean(Sum):
    def forward(self, x):
        y = super().forward(x)
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        return y / self.count

    def backward(self, gy):
        return super().backward(gy) / self.count


def sum(x, axis=None, keepdims=False):
    return Sum(axis, keepdims).apply(x)


def mean(x, axis=None, keepdims=False):
    return Mean(axis, keepdims).apply(x)
