"""Numerical gradient checks: central differences in float64 against what backward() computes."""
import numpy

from .backend import get_array_module, to_host
from .function import no_grad
from .tensor import Tensor


def numerical_grad(f, inputs, upstream, eps=1e-6):
    """d(sum(f(*inputs) * upstream)) / d(input) for each input, by central differences."""
    grads = []
    for x in inputs:
        g = numpy.zeros(x.shape, dtype=numpy.float64)
        flat = x.data.reshape(-1)  # a view: editing it perturbs x in place
        for i in range(flat.size):
            old = flat[i].item()
            flat[i] = old + eps
            plus = float((to_host(f(*inputs).data) * upstream).sum())
            flat[i] = old - eps
            minus = float((to_host(f(*inputs).data) * upstream).sum())
            flat[i] = old
            g.reshape(-1)[i] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def gradcheck(f, *arrays, eps=1e-6, atol=1e-6, rtol=1e-5, seed=0):
    """Check the analytic gradients of ``f(*tensors) -> Tensor`` against central differences.

    ``arrays`` must be float64. The output is weighted by a fresh random upstream gradient, so an error that a
    plain sum would cancel out still shows. Raises AssertionError naming the input and the worst element.
    """
    for i, a in enumerate(arrays):
        if a.dtype != numpy.float64:
            raise TypeError(f"gradcheck: input {i} is {a.dtype}; central differences need float64")
    xp = get_array_module(*arrays)
    inputs = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    y = f(*inputs)
    upstream = numpy.random.default_rng(seed).standard_normal(y.shape)
    y.backward(xp.asarray(upstream))
    with no_grad():
        expected = numerical_grad(f, inputs, upstream, eps)
    for i, (x, num) in enumerate(zip(inputs, expected)):
        got = numpy.zeros_like(num) if x.grad is None else to_host(x.grad)
        if not numpy.allclose(got, num, atol=atol, rtol=rtol):
            worst = numpy.unravel_index(numpy.argmax(numpy.abs(got - num)), num.shape)
            raise AssertionError(f"gradcheck: input {i} of shape {x.shape}: analytic {got[worst]:.8g} against "
                                 f"numerical {num[worst]:.8g} at index {tuple(int(w) for w in worst)}")
    return True
