"""``Function.early_backward``: among the Functions whose backward may run next, the early one runs first, and the
gradients are those of any order."""
import numpy as np
import pytest

from gpuemb.autograd import Function, Tensor

RAN = []


class Scale(Function):
    def __init__(self, name, k):
        self.label, self.k = name, k

    def forward(self, x):
        return self.k * x

    def backward(self, gy):
        RAN.append(self.label)
        return self.k * gy


class EarlyScale(Scale):
    early_backward = True


@pytest.mark.parametrize("first, second", [(Scale, EarlyScale), (EarlyScale, Scale)])
def test_the_early_branch_runs_its_backward_first_whatever_the_input_order(first, second, rng):
    a, b = (Tensor(rng.standard_normal(3), requires_grad=True) for _ in range(2))
    x, y = first("a", 2.0).apply(a), second("b", 3.0).apply(b)
    RAN.clear()
    (x * y).sum().backward()
    early = "a" if first is EarlyScale else "b"
    assert RAN[0] == early and sorted(RAN) == ["a", "b"]
    np.testing.assert_allclose(a.grad, 2 * 3 * b.data * 1.0 * 1)
    np.testing.assert_allclose(b.grad, 3 * 2 * a.data)
