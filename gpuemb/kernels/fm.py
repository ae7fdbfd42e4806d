"""DeepFM's factorization-machine interaction: the sum of all pairwise products of a sample's embeddings.

For ``emb [B, F, D]``: ``y = 0.5 · ((Σ_f e_f)² − Σ_f e_f²)``, the identity that turns the O(F²) sum of pairs
``Σ_{f<g} e_f ⊙ e_g`` into O(F). ``reduce=True`` sums over D into ``[B, 1]`` (the FM logit); ``reduce=False``
keeps ``[B, D]``. The backward is ``d y_d / d e_{f,d} = s_d − e_{f,d}`` with ``s = Σ_f e_f``.

- ``*_ref``: NumPy.
- ``*_cpu``: numba, parallel over chunks of samples, column sums kept in a scratch row so the loop over D is
  contiguous and vectorises.
- ``*_cuda``: one thread per (sample, column) loops over F, so a warp reads neighbouring columns; the backward
  thread sums its column's s first, then writes the F gradients of that column (the second read hits cache).
  The ``[B, 1]`` form sums the ``[B, D]`` result with ``xp``: D is small, a second kernel would not pay.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import Function
from gpuemb.autograd.backend import get_array_module, is_device_array

from .chunks import chunk_size
from gpuemb.autograd.launch import kernel, over


def fm_ref(emb, reduce=True):
    """``[B, 1]`` (reduce) or ``[B, D]``: ``0.5 · ((Σ_f e_f)² − Σ_f e_f²)`` for ``emb [B, F, D]``."""
    s = emb.sum(axis=1)
    y = 0.5 * (s * s - (emb * emb).sum(axis=1))
    return y.sum(axis=1, keepdims=True) if reduce else y


def fm_backward_ref(gy, emb):
    """``[B, F, D]`` gradient of emb from ``gy`` ``[B, 1]`` or ``[B, D]``."""
    return gy[:, None, :] * (emb.sum(axis=1, keepdims=True) - emb)


@numba.njit(parallel=True, cache=True)
def _fm_cpu(emb, zero, half, chunk, out):
    B, F, D = emb.shape
    for c in numba.prange(-(-B // chunk)):
        s, q = np.empty(D, emb.dtype), np.empty(D, emb.dtype)
        for b in range(c * chunk, min(B, (c + 1) * chunk)):
            for d in range(D):
                s[d], q[d] = zero, zero
            for f in range(F):  # d innermost: contiguous, so the column sums vectorise
                for d in range(D):
                    v = emb[b, f, d]
                    s[d] += v
                    q[d] += v * v
            if out.shape[1] == 1:
                total = zero
                for d in range(D):
                    total += s[d] * s[d] - q[d]
                out[b, 0] = total * half
            else:
                for d in range(D):
                    out[b, d] = (s[d] * s[d] - q[d]) * half
    return out


@numba.njit(parallel=True, cache=True)
def _fm_backward_cpu(gy, emb, zero, chunk, out):
    B, F, D = emb.shape
    last = gy.shape[1] - 1
    for c in numba.prange(-(-B // chunk)):
        s = np.empty(D, emb.dtype)
        for b in range(c * chunk, min(B, (c + 1) * chunk)):
            for d in range(D):
                s[d] = zero
            for f in range(F):
                for d in range(D):
                    s[d] += emb[b, f, d]
            for f in range(F):
                for d in range(D):
                    out[b, f, d] = gy[b, min(d, last)] * (s[d] - emb[b, f, d])  # a [B, 1] gy: one value per row
    return out


def fm_cpu(emb, reduce=True):
    out = np.empty((emb.shape[0], 1 if reduce else emb.shape[2]), dtype=emb.dtype)
    return _fm_cpu(np.ascontiguousarray(emb), emb.dtype.type(0), emb.dtype.type(0.5), chunk_size(emb.shape[0]), out)


def fm_backward_cpu(gy, emb):
    return _fm_backward_cpu(np.ascontiguousarray(gy), np.ascontiguousarray(emb), emb.dtype.type(0),
                            chunk_size(emb.shape[0]), np.empty(emb.shape, dtype=emb.dtype))


@kernel
def _fm_kernel(emb, zero, out):
    F, D = emb.shape[1], emb.shape[2]
    for k in range(cuda.grid(1), emb.shape[0] * D, cuda.gridsize(1)):
        b = k // D
        d = k - b * D
        s, q = zero, zero
        for f in range(F):
            v = emb[b, f, d]
            s += v
            q += v * v
        out[b, d] = (s * s - q) * 0.5


@kernel
def _fm_backward_kernel(gy, emb, zero, out):
    F, D = emb.shape[1], emb.shape[2]
    for k in range(cuda.grid(1), emb.shape[0] * D, cuda.gridsize(1)):
        b = k // D
        d = k - b * D
        s = zero
        for f in range(F):
            s += emb[b, f, d]
        g = gy[b, min(d, gy.shape[1] - 1)]
        for f in range(F):
            out[b, f, d] = g * (s - emb[b, f, d])


def fm_cuda(emb, reduce=True):
    B, _, D = emb.shape
    out = get_array_module(emb).empty((B, D), dtype=emb.dtype)
    _fm_kernel[over(B * D, emb)](emb, emb.dtype.type(0), out)
    return out.sum(axis=1, keepdims=True) if reduce else out


def fm_backward_cuda(gy, emb):
    out = get_array_module(emb).empty(emb.shape, dtype=emb.dtype)
    _fm_backward_kernel[over(emb.shape[0] * emb.shape[2], emb)](gy, emb, emb.dtype.type(0),
                                                                                      out)
    return out


def fm(emb, reduce=True):
    """FM interaction of ``emb [B, F, D]``: ``[B, 1]`` summed over D, or ``[B, D]`` with ``reduce=False``."""
    if emb.ndim != 3:
        raise ValueError(f"fm: want embeddings [B, F, D], got shape {emb.shape}")
    return fm_cuda(emb, reduce) if is_device_array(emb) else fm_cpu(emb, reduce)


def fm_backward(gy, emb):
    """Gradient ``[B, F, D]`` of the embeddings from ``gy`` ``[B, 1]`` or ``[B, D]``."""
    if gy.ndim != 2 or gy.shape[0] != emb.shape[0] or gy.shape[1] not in (1, emb.shape[2]):
        raise ValueError(f"fm_backward: gradient of shape {gy.shape} does not fit embeddings of shape {emb.shape}")
    return fm_backward_cuda(gy, emb) if is_device_array(emb) else fm_backward_cpu(gy, emb)


class FMInteraction(Function):
    """Autograd op: ``FMInteraction(reduce).apply(emb)``."""

    def __init__(self, reduce=True):
        self.reduce = bool(reduce)

    def forward(self, emb):
        self.emb = emb
        return fm(emb, self.reduce)

    def backward(self, gy):
        return fm_backward(gy, self.emb)
