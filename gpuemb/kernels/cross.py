"""DCN's cross layer, ``x_{l+1} = x0 ⊙ f(x_l) + x_l``, in its three forms (``x0, x_l [B, D]``):

- ``"vector"`` (DCN v1): ``x0 · (x_l·w) + b + x_l``, ``w [D]``: the product is one number per sample.
- ``"matrix"`` (DCN v2): ``x0 ⊙ (x_l·W + b) + x_l``, ``W [D, D]``.
- ``"lowrank"`` (DCN v2, mixture-free): ``W = U·Vᵀ``, so ``x0 ⊙ ((x_l·U)·Vᵀ + b) + x_l``, ``U, V [D, r]``.

Every form is a plain matmul giving ``h`` (``[B, 1]`` for vector, ``[B, D]`` otherwise), done by BLAS or cuBLAS
through ``@`` (by cuBLASLt at a reduced compute precision: gemm.py), and one elementwise step, ``combine``:
``x0 ⊙ (h + b) + x_l``, or ``x0 ⊙ h + b + x_l`` when the bias sits outside (vector). That step and its backward
(``g_x0 = gy ⊙ (h + b)``, ``g_h = gy ⊙ x0``) are fused
into one pass each:

- ``combine_ref`` / ``combine_backward_ref``: NumPy;
- ``*_cpu``: numba, parallel over rows;
- ``*_cuda``: one thread per element.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import Function
from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.launch import kernel, over

from .gemm import COMPUTE, matmul

FORMS = {"vector": 1, "matrix": 1, "lowrank": 2}  # form: how many weight matrices it takes


# -- the fused elementwise step ------------------------------------------------------------------------------------
def combine_ref(x0, h, b, xl, bias_inside=True):
    """``x0 ⊙ (h + b) + x_l`` (or ``x0 ⊙ h + b + x_l``); ``h`` is ``[B, D]`` or ``[B, 1]``."""
    return x0 * (h + b) + xl if bias_inside else x0 * h + b + xl


def combine_backward_ref(gy, x0, h, b, bias_inside=True):
    """``(g_x0, g_h)``, both ``[B, D]``: ``gy ⊙ (h + b)`` (``gy ⊙ h``) and ``gy ⊙ x0``."""
    return gy * (h + b if bias_inside else h), gy * x0


@numba.njit(parallel=True, cache=True)
def _combine_cpu(x0, h, b, xl, inside, out):
    B, D = x0.shape
    last = h.shape[1] - 1
    for r in numba.prange(B):
        for d in range(D):
            hb = h[r, min(d, last)]
            out[r, d] = x0[r, d] * (hb + b[d]) + xl[r, d] if inside else x0[r, d] * hb + b[d] + xl[r, d]
    return out


@numba.njit(parallel=True, cache=True)
def _combine_backward_cpu(gy, x0, h, b, inside, g_x0, g_h):
    B, D = x0.shape
    last = h.shape[1] - 1
    for r in numba.prange(B):
        for d in range(D):
            hb = h[r, min(d, last)]
            g_x0[r, d] = gy[r, d] * (hb + b[d] if inside else hb)
            g_h[r, d] = gy[r, d] * x0[r, d]
    return g_x0, g_h


def combine_cpu(x0, h, b, xl, bias_inside=True):
    return _combine_cpu(x0, h, b, xl, bias_inside, np.empty(x0.shape, dtype=x0.dtype))


def combine_backward_cpu(gy, x0, h, b, bias_inside=True):
    return _combine_backward_cpu(gy, x0, h, b, bias_inside, np.empty(x0.shape, x0.dtype), np.empty(x0.shape, x0.dtype))


@kernel
def _combine_kernel(x0, h, b, xl, inside, out):
    D = x0.shape[1]
    for k in range(cuda.grid(1), x0.size, cuda.gridsize(1)):
        r, d = k // D, k % D
        hb = h[r, min(d, h.shape[1] - 1)]
        out[r, d] = x0[r, d] * (hb + b[d]) + xl[r, d] if inside else x0[r, d] * hb + b[d] + xl[r, d]


@kernel
def _combine_backward_kernel(gy, x0, h, b, inside, g_x0, g_h):
    D = x0.shape[1]
    for k in range(cuda.grid(1), x0.size, cuda.gridsize(1)):
        r, d = k // D, k % D
        hb = h[r, min(d, h.shape[1] - 1)]
        g_x0[r, d] = gy[r, d] * (hb + b[d] if inside else hb)
        g_h[r, d] = gy[r, d] * x0[r, d]


def combine_cuda(x0, h, b, xl, bias_inside=True):
    out = get_array_module(x0).empty(x0.shape, dtype=x0.dtype)
    _combine_kernel[over(x0.size, x0)](x0, h, b, xl, bias_inside, out)
    return out


def combine_backward_cuda(gy, x0, h, b, bias_inside=True):
    xp = get_array_module(x0)
    g_x0, g_h = xp.empty(x0.shape, dtype=x0.dtype), xp.empty(x0.shape, dtype=x0.dtype)
    _combine_backward_kernel[over(x0.size, x0)](gy, x0, h, b, bias_inside, g_x0, g_h)
    return g_x0, g_h


def _check_step(x0, h, b, other, name):
    B, D = x0.shape
    if other.shape != (B, D) or h.ndim != 2 or h.shape[0] != B or h.shape[1] not in (1, D) or b.shape != (D,):
        raise ValueError(f"cross {name}: want x0 and {'x_l' if name == 'combine' else 'gy'} [B, D], h [B, D] or "
                         f"[B, 1] and b [D], got {x0.shape}, {other.shape}, {h.shape} and {b.shape}")


def combine(x0, h, b, xl, bias_inside=True):
    """The cross layer's elementwise step, fused: ``x0 ⊙ (h + b) + x_l`` or ``x0 ⊙ h + b + x_l``."""
    _check_step(x0, h, b, xl, "combine")
    return (combine_cuda if is_device_array(x0) else combine_cpu)(x0, h, b, xl, bias_inside)


def combine_backward(gy, x0, h, b, bias_inside=True):
    """``(g_x0, g_h)`` of the elementwise step; ``g_h`` is ``[B, D]`` (sum it over D for a ``[B, 1]`` h)."""
    _check_step(x0, h, b, gy, "combine_backward")
    return (combine_backward_cuda if is_device_array(x0) else combine_backward_cpu)(gy, x0, h, b, bias_inside)


# -- the layer -------------------------------------------------------------------------------------------------------
def cross_ref(x0, xl, weights, b, form):
    """``x_{l+1} [B, D]`` of one cross layer; ``weights`` is ``(w,)``, ``(W,)`` or ``(U, V)`` by ``form``."""
    if form == "vector":
        return x0 * (xl @ weights[0])[:, None] + b + xl
    W = weights[0] if form == "matrix" else weights[0] @ weights[1].T
    return x0 * (xl @ W + b) + xl


def _check(x0, xl, weights, b, form):
    if form not in FORMS:
        raise ValueError(f"cross: form={form!r}; use one of {', '.join(FORMS)}")
    if len(weights) != FORMS[form]:
        raise ValueError(f"cross: the {form} form takes {FORMS[form]} weight array(s), got {len(weights)}")
    D = x0.shape[-1]
    if x0.ndim != 2 or xl.shape != x0.shape or b.shape != (D,):
        raise ValueError(f"cross: want x0, x_l [B, D] and b [D], got {x0.shape}, {xl.shape} and {b.shape}")
    want = {"vector": [(D,)], "matrix": [(D, D)], "lowrank": [(D, weights[0].shape[-1])] * 2}[form]
    if [w.shape for w in weights] != want:
        raise ValueError(f"cross: {form} weights of shapes {[w.shape for w in weights]}; want {want}")


class Cross(Function):
    """One cross layer: ``Cross(form, precision).apply(x0, x_l, *weights, b)``; gradients for x0, x_l, the weights
    and b. precision: what the matrix and low-rank forms' matmuls compute in (gemm.py; "fp32", or on a GPU "fp16",
    "bf16" or "tf32"); the vector form's matrix-vector products, bound by memory, stay float32."""

    def __init__(self, form="matrix", precision="fp32"):
        if precision not in COMPUTE:
            raise ValueError(f"Cross: precision={precision!r}; use one of {', '.join(COMPUTE)}")
        self.form, self.precision = form, precision

    def _mm(self, a, b):
        return matmul(a, b, self.precision)

    def forward(self, x0, xl, *rest):
        *weights, b = rest
        _check(x0, xl, weights, b, self.form)
        if self.form == "vector":
            h = (xl @ weights[0])[:, None]
        elif self.form == "matrix":
            h = self._mm(xl, weights[0])
        else:
            self.t = self._mm(xl, weights[0])  # [B, r]: the low-rank path never forms the [D, D] product
            h = self._mm(self.t, weights[1].T)
        self.x0, self.xl, self.weights, self.b, self.h = x0, xl, weights, b, h
        return combine(x0, h, b, xl, self.form != "vector")

    def backward(self, gy):
        g_x0, g_h = combine_backward(gy, self.x0, self.h, self.b, self.form != "vector")
        if self.form == "vector":
            g_h = g_h.sum(axis=1)
            return g_x0, gy + g_h[:, None] * self.weights[0], self.xl.T @ g_h, gy.sum(axis=0)
        g_b = g_h.sum(axis=0)
        mm = self._mm
        if self.form == "matrix":
            return g_x0, gy + mm(g_h, self.weights[0].T), mm(self.xl.T, g_h), g_b
        U, V = self.weights
        g_t = mm(g_h, V)
        return g_x0, gy + mm(g_t, U.T), mm(self.xl.T, g_t), mm(g_h.T, self.t), g_b
