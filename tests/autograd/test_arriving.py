"""ArrivingTensor: the shape at once, the values once ``arrive`` ran, which it does once, when first read; the tape
sees the op's output as it was."""
import numpy as np

from gpuemb.autograd import Function, Tensor
from gpuemb.autograd.arriving import ArrivingTensor


class Later(Function):
    """y = 3x, whose array is written only by ``fill()`` (as rows that come back by an all-to-all)."""

    def forward(self, x):
        self.x, self.out = x, np.full_like(x, np.nan)
        return self.out

    def fill(self):
        self.filled = getattr(self, "filled", 0) + 1
        self.out[...] = 3 * self.x

    def backward(self, gy):
        return 3 * gy


def test_the_values_arrive_once_when_first_read_and_the_gradient_flows(rng):
    x = Tensor(rng.standard_normal((4, 3)), requires_grad=True)
    op = Later()
    y = ArrivingTensor(op.apply(x), op.fill)
    assert y.shape == (4, 3) and y.dtype == np.float64 and y.ndim == 2 and y.size == 12
    assert not y.arrived and not hasattr(op, "filled")  # its facts did not wait
    w = rng.standard_normal(3)
    loss = (y * Tensor(w)).sum()  # an op reads it: it arrives first
    assert y.arrived and op.filled == 1
    np.testing.assert_array_equal(y.data, 3 * x.data)
    loss.backward()
    assert op.filled == 1
    np.testing.assert_allclose(x.grad, np.broadcast_to(3 * w, (4, 3)))
    assert y.creator is op and y.requires_grad
