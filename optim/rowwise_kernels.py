"""The fused row update kernels: numba on the CPU, numba.cuda on the GPU, one shared body of math.

A rule becomes a code and five float64 hyperparameters (``kernel_args``). The math of one row and of one
coordinate is written once, as plain Python, and compiled for both targets (``numba.njit`` and
``cuda.jit(device=True)``):
- ``_begin_row``: bump the row's step; for row-wise Adagrad, add the row's mean of g² to its accumulator;
- ``_bias_corrections``: Adam's step-dependent factors, hoisted out of the loop over D (two powers a weight made
  the CPU update 3x slower);
- ``_update_element``: one coordinate: the weight at column d, per-coordinate state at ``D + d`` and ``2D + d``
  (row-wise Adagrad's accumulator at ``D``), the layout of ``rowwise.row_layout``.
The CPU kernel runs them in one pass, parallel over rows, inlined (5x faster than calls, measured on 2 cores).
The CUDA one runs two launches, one thread per row, then one per (row, d), so every coordinate of a row reads the
finished step and accumulator without a block-wide barrier. Slots are unique, so no two threads write one row:
no atomics, the same result every run.
Intermediates are float64; each state is rounded to the storage dtype before it is used, as the reference does.
"""
import math

import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import backend
from gpuemb.autograd.launch import kernel, over

SGD, MOMENTUM, ADAGRAD, ROWWISE_ADAGRAD, ADAM, FTRL = range(6)
KERNELS = {"sgd": SGD, "momentum": MOMENTUM, "adagrad": ADAGRAD, "rowwise_adagrad": ROWWISE_ADAGRAD, "adam": ADAM,
           "ftrl": FTRL}  # the math these kernels know, by the name a rule's fused_args gives
THREADS = 256


def kernel_args(rule):
    """``(code, h)``: the kernels' rule code and hyperparameters, float64 ``[5]`` with ``h[0]`` the weight decay;
    None for a rule without a fused kernel (one whose own class does not define ``fused_args``)."""
    args = rule.fused_args() if "fused_args" in vars(type(rule)) else None
    if args is None:
        return None
    name, h = args
    return KERNELS[name], np.array([rule.weight_decay, *h] + [0.0] * (4 - len(h)), dtype=np.float64)


def has_kernel(rule):
    """Whether ``rule``'s row update runs in the fused kernels."""
    return kernel_args(rule) is not None


def _begin_row(rows, steps, has_steps, r, grads, i, kind, h):
    if has_steps:
        steps[r] += 1
    if kind == ROWWISE_ADAGRAD:
        D = grads.shape[1]
        s = 0.0
        for d in range(D):
            g = grads[i, d] + h[0] * rows[r, d]
            s += g * g
        rows[r, D] += s / D


def _bias_corrections(kind, h, t):
    """Adam's ``1 - b1**t`` and ``sqrt(1 - b2**t)`` for a row at step t, once a row rather than once a weight."""
    if kind == ADAM:
        return 1 - h[1] ** t, math.sqrt(1 - h[2] ** t)
    return 1.0, 1.0


def _update_element(rows, r, d, D, g, kind, h, lr, c1, c2):
    w = rows[r, d]
    if kind == ADAM and h[4]:  # AdamW: decay decoupled from the gradient
        w -= lr * h[0] * w
    else:
        g += h[0] * w
    if kind == SGD:
        w -= lr * g
    elif kind == MOMENTUM:
        rows[r, D + d] = h[1] * rows[r, D + d] + g
        buf = rows[r, D + d]
        w -= lr * (g + h[1] * buf if h[2] else buf)
    elif kind == ADAGRAD:
        rows[r, D + d] += g * g
        w -= lr * g / (math.sqrt(rows[r, D + d]) + h[1])
    elif kind == ROWWISE_ADAGRAD:
        w -= lr * g / (math.sqrt(rows[r, D]) + h[1])
    elif kind == ADAM:
        b1, b2 = h[1], h[2]
        rows[r, D + d] = b1 * rows[r, D + d] + (1 - b1) * g
        rows[r, 2 * D + d] = b2 * rows[r, 2 * D + d] + (1 - b2) * (g * g)
        m, v = rows[r, D + d], rows[r, 2 * D + d]
        w -= lr / c1 * m / (math.sqrt(v) / c2 + h[3])
    else:  # FTRL
        l1, l2, beta, p = h[1], h[2], h[3], h[4]
        n = rows[r, 2 * D + d]
        rows[r, 2 * D + d] = n + g * g
        n_new = rows[r, 2 * D + d]
        rows[r, D + d] += g - (n_new ** p - n ** p) / lr * w
        z = rows[r, D + d]
        w = 0.0 if abs(z) <= l1 else ((l1 if z > 0 else -l1) - z) / ((beta + n_new ** p) / lr + l2)
    rows[r, d] = w


# -- CPU ---------------------------------------------------------------------------------------------------------
_begin_row_cpu = numba.njit(inline="always")(_begin_row)
_bias_corrections_cpu = numba.njit(inline="always")(_bias_corrections)
_update_element_cpu = numba.njit(inline="always")(_update_element)


@numba.njit(parallel=True, cache=True)
def _apply_rows_cpu(rows, steps, has_steps, slots, grads, kind, h, lr):
    D = grads.shape[1]
    for i in numba.prange(slots.shape[0]):
        r = slots[i]
        _begin_row_cpu(rows, steps, has_steps, r, grads, i, kind, h)
        c1, c2 = _bias_corrections_cpu(kind, h, steps[r] if has_steps else 1)
        for d in range(D):
            _update_element_cpu(rows, r, d, D, grads[i, d], kind, h, lr, c1, c2)


def apply_rows_cpu(rows, steps, slots, grads, rule, lr):
    """The fused update on NumPy storage, in place; ``steps`` may be None for rules without a step."""
    kind, h = kernel_args(rule)
    has_steps = steps is not None
    steps = steps if has_steps else np.zeros(1, np.int32)  # a kernel argument is never None
    _apply_rows_cpu(rows, steps, has_steps, slots, grads, kind, h, float(lr))


# -- CUDA --------------------------------------------------------------------------------------------------------
_begin_row_gpu = cuda.jit(device=True)(_begin_row)
_bias_corrections_gpu = cuda.jit(device=True)(_bias_corrections)
_update_element_gpu = cuda.jit(device=True)(_update_element)


@kernel
def _begin_rows_kernel(rows, steps, has_steps, slots, grads, kind, h):
    for i in range(cuda.grid(1), slots.shape[0], cuda.gridsize(1)):
        _begin_row_gpu(rows, steps, has_steps, slots[i], grads, i, kind, h)


@kernel
def _update_elements_kernel(rows, steps, has_steps, slots, grads, kind, h, lr):
    D = grads.shape[1]
    for k in range(cuda.grid(1), slots.shape[0] * D, cuda.gridsize(1)):
        i = k // D
        d = k - i * D
        r = slots[i]
        c1, c2 = _bias_corrections_gpu(kind, h, steps[r] if has_steps else 1)
        _update_element_gpu(rows, r, d, D, grads[i, d], kind, h, lr, c1, c2)


_ON_DEVICE = {}  # (code, hyperparameters) -> the hyperparameters on the device


def _device_args(rule, xp):
    """``kernel_args`` with ``h`` on the device, uploaded once per distinct rule rather than once per update."""
    kind, h = kernel_args(rule)
    key = (kind, h.tobytes())
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = xp.asarray(h)
    return kind, _ON_DEVICE[key]


def apply_rows_cuda(rows, steps, slots, grads, rule, lr):
    """The fused update with numba.cuda, in place (CuPy storage, or NumPy in the simulator)."""
    xp = backend.get_array_module(rows)
    kind, h = _device_args(rule, xp)
    has_steps = steps is not None
    steps = steps if has_steps else xp.zeros(1, np.int32)  # a kernel argument is never None
    n = slots.shape[0]
    if has_steps or kind == ROWWISE_ADAGRAD:
        grid = over(n, rows, THREADS)
        _begin_rows_kernel[grid](rows, steps, has_steps, slots, grads, kind, h)
    grid = over(n * grads.shape[1], rows, THREADS)
    _update_elements_kernel[grid](rows, steps, has_steps, slots, grads, kind, h, float(lr))
