"""Elementwise arithmetic with NumPy broadcasting: add, sub, mul, div, neg, pow."""
from ..backend import get_array_module
from ..function import Function
from .broadcast import broadcast_shape, shape_of, unbroadcast


class _Binary(Function):
    """Checks the operands broadcast, and keeps their shapes for the gradient reduction."""

    def forward(self, a, b):
        broadcast_shape(self.name.lower(), a, b)
        self.shapes = (shape_of(a), shape_of(b))
        return self.compute(a, b)

    def reduce(self, ga, gb):
        return (None if ga is None else unbroadcast(ga, self.shapes[0]),
                None if gb is None else unbroadcast(gb, self.shapes[1]))


class Add(_Binary):
    def compute(self, a, b):
        return a + b

    def backward(self, gy):
        return self.reduce(gy, gy)


class Sub(_Binary):
    def compute(self, a, b):
        return a - b

    def backward(self, gy):
        return self.reduce(gy, -gy)


class Mul(_Binary):
    def compute(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, gy):
        need_a, need_b = self.needs_input_grad
        return self.reduce(gy * self.b if need_a else None, gy * self.a if need_b else None)


class Div(_Binary):
    def compute(self, a, b):
        self.a, self.b = a, b
        return a / b

    def backward(self, gy):
        need_a, need_b = self.needs_input_grad
        ga = gy / self.b if need_a else None
        gb = -gy * self.a / (self.b * self.b) if need_b else None
        return self.reduce(ga, gb)


class Pow(_Binary):
    """``a ** b``; the gradient for ``b`` needs ``a > 0`` (it uses log a)."""

    def compute(self, a, b):
        self.a, self.b = a, b
        self.y = a ** b
        return self.y

    def backward(self, gy):
        need_a, need_b = self.needs_input_grad
        xp = get_array_module(gy)
        ga = gy * self.b * self.a ** (self.b - 1) if need_a else None
        gb = gy * self.y * xp.log(self.a) if need_b else None
        return self.reduce(ga, gb)


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


def add(a, b):
    return Add().apply(a, b)


def sub(a, b):
    return Sub().apply(a, b)


def mul(a, b):
    return Mul().apply(a, b)


def div(a, b):
    return Div().apply(a, b)


def pow(a, b):
    return Pow().apply(a, b)


def neg(x):
    return Neg().apply(x)
