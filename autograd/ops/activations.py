"""Pointwise activations: relu, sigmoid, tanh, exp, log."""
from ..backend import get_array_module
from ..function import Function


class ReLU(Function):
    def forward(self, x):
        self.positive = x > 0
        return get_array_module(x).maximum(x, 0)

    def backward(self, gy):
        return gy * self.positive


class Sigmoid(Function):
    def forward(self, x):
        xp = get_array_module(x)
        self.y = xp.exp(-xp.logaddexp(0, -x))  # never overflows, unlike 1 / (1 + exp(-x))
        return self.y

    def backward(self, gy):
        return gy * self.y * (1 - self.y)


class Tanh(Function):
    def forward(self, x):
        self.y = get_array_module(x).tanh(x)
        return self.y

    def backward(self, gy):
        return gy * (1 - self.y * self.y)


class Exp(Function):
    def forward(self, x):
        self.y = get_array_module(x).exp(x)
        return self.y

    def backward(self, gy):
        return gy * self.y


class Log(Function):
    def forward(self, x):
        self.x = x
        return get_array_module(x).log(x)

    def backward(self, gy):
        return gy / self.x


def relu(x):
    return ReLU().apply(x)


def sigmoid(x):
    return Sigmoid().apply(x)


def tanh(x):
    return Tanh().apply(x)


def exp(x):
    return Exp().apply(x)


def log(x):
    return Log().apply(x)
