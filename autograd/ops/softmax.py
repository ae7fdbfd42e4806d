"""softmax and log_softmax along an axis, shifted by the max so exp never overflows."""
from ..backend import get_array_module
from ..function import Function


class Softmax(Function):
    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        xp = get_array_module(x)
        e = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        self.y = e / e.sum(axis=self.axis, keepdims=True)
        return self.y

    def backward(self, gy):
        return self.y * (gy - (gy * self.y).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        xp = get_array_module(x)
        shifted = x - x.max(axis=self.axis, keepdims=True)
        self.y = shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))
        return self.y

    def backward(self, gy):
        xp = get_array_module(gy)
        return gy - xp.exp(self.y) * gy.sum(axis=self.axis, keepdims=True)


def softmax(x, axis=-1):
    return Softmax(axis).apply(x)


def log_softmax(x, axis=-1):
    return LogSoftmax(axis).apply(x)
