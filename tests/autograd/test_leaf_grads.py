"""A leaf's gradient is its own array: copied where another holder could see it, taken as it is where not."""
import numpy as np

from gpuemb.autograd import Function, Tensor


class Fresh(Function):
    """y = 2x, whose backward makes a new array (and remembers it, to compare)."""

    def forward(self, x):
        return 2 * x

    def backward(self, gy):
        self.made = 2 * gy
        return self.made


class PassThrough(Function):
    """y = a + b, whose backward hands the same output gradient to both inputs."""

    def forward(self, a, b):
        return a + b

    def backward(self, gy):
        return gy, gy


def test_a_fresh_gradient_is_taken_without_a_copy(rng):
    x = Tensor(rng.standard_normal(5), requires_grad=True)
    f = Fresh()
    f.apply(x).backward(rng.standard_normal(5))
    assert x.grad is f.made


def test_a_gradient_passed_through_or_shared_is_copied(rng):
    a, b = (Tensor(rng.standard_normal(4), requires_grad=True) for _ in range(2))
    gy = rng.standard_normal(4)
    PassThrough().apply(a, b).backward(gy)
    assert a.grad is not b.grad and a.grad is not gy and b.grad is not gy
    a.grad *= 0  # a loss scaler unscales in place: the other leaf's gradient must not move
    np.testing.assert_array_equal(b.grad, gy)
