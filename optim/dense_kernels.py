"""One-pass CPU kernels for the dense rules, on a parameter or a whole flat group (flat.py).

NumPy runs a rule one operation at a time, each a full pass over the parameters with a temporary of their size.
Adagrad's ``acc += g²; w -= lr·g / (sqrt(acc) + eps)`` is seven passes and five temporaries. Over MLPerf
DLRM-DCNv2's 16M dense weights (64 MB a temporary, past glibc's mmap threshold, so each one is mapped and faulted
in afresh) that was 175 ms of a 695 ms CPU step. The kernel reads each weight, gradient and sum once and writes
two of them back.

Each kernel takes the hyperparameters as the arrays' float type and does the operations in NumPy's order, with no
fused multiply-add, so it gives the very bits of the rule's NumPy update (NumPy casts a Python float to the
array's type, NEP 50); tests/optim/test_dense_kernels.py checks that. A GPU keeps the rule's CuPy update.
"""
import numba
import numpy as np

from gpuemb.autograd.backend import is_device_array

FLOATS = (np.float32, np.float64)


@numba.njit(parallel=True, cache=True)
def _adagrad(w, grad, acc, lr, eps, decay):
    for i in numba.prange(w.shape[0]):
        g = grad[i]
        if decay != 0:
            g = g + decay * w[i]
        a = acc[i] + g * g
        acc[i] = a
        w[i] = w[i] - lr * g / (np.sqrt(a) + eps)


@numba.njit(parallel=True, cache=True)
def _adam(w, grad, m, v, b1, one_b1, b2, one_b2, c1, c2, eps, decay, shrink):
    for i in numba.prange(w.shape[0]):
        wi = w[i]
        if shrink != 1:  # AdamW: the decoupled decay comes first
            wi = wi * shrink
        g = grad[i]
        if decay != 0:  # Adam: L2 folded into the gradient
            g = g + decay * wi
        mi = m[i] * b1
        mi = mi + one_b1 * g
        m[i] = mi
        vi = v[i] * b2
        vi = vi + one_b2 * (g * g)
        v[i] = vi
        w[i] = wi - c1 * mi / (np.sqrt(vi) / c2 + eps)


def fusable(lr, param, *arrays):
    """Whether the kernels can take this update: host arrays of one float dtype, C-contiguous, of one size, and a
    Python float ``lr`` (a NumPy float64 ``lr`` makes NumPy compute in float64, which the kernels do not)."""
    if type(lr) is not float or is_device_array(param) or param.dtype.type not in FLOATS:
        return False
    return all(a.dtype == param.dtype and a.flags.c_contiguous and a.size == param.size
               for a in (param, *arrays))


def adagrad(w, grad, acc, lr, eps, decay):
    """Adagrad on ``w`` and its sum ``acc`` in place (AdagradRule.update's math); see ``fusable``."""
    t = w.dtype.type
    _adagrad(w.reshape(-1), grad.reshape(-1), acc.reshape(-1), t(lr), t(eps), t(decay))


def adam(w, grad, m, v, lr, step, betas, eps, decay, decoupled):
    """Adam (AdamW where ``decoupled``) on ``w`` and its moments in place, at the int ``step`` (AdamRule.update's
    math); the bias corrections are Python floats, as NumPy's update makes them, cast once to the arrays' type."""
    t, (b1, b2) = w.dtype.type, betas
    shrink = 1 - lr * decay if decoupled and decay else 1.0
    _adam(w.reshape(-1), grad.reshape(-1), m.reshape(-1), v.reshape(-1), t(b1), t(1 - b1), t(b2), t(1 - b2),
          t(lr / (1 - b1 ** step)), t((1 - b2 ** step) ** 0.5), t(eps), t(0.0 if decoupled else decay), t(shrink))
