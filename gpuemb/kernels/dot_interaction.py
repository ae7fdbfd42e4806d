"""DLRM's dot interaction: the pairwise dot products of a sample's feature vectors.

Z = ``[B, n, D]`` with n = F + 1 stacks the bottom-MLP output ``[B, D]`` (row 0) on the embeddings ``[B, F, D]``.
The output ``[B, W]`` is ``concat(bottom, the strict lower triangle of Z·Zᵀ)``, the pairs (i, j) with i > j in
row-major order (torch's ``tril_indices(n, n, -1)``; with ``self_interaction`` the diagonal too, offset 0), then
zeros up to a width W that is a multiple of ``pad_to`` (1: no padding), so the top MLP's GEMM gets aligned rows.

The backward: Y = tril(Z·Zᵀ), so dZ = (G + Gᵀ)·Z where G holds the pair gradients at their (i, j); a diagonal
gradient counts twice. No version builds that dense symmetric matrix except the reference.

- ``*_ref``: NumPy, the definition.
- ``*_cpu``: numba, parallel over chunks of samples. The forward computes only the lower triangle with explicit
  loops over D, four pairs of a row at a time, and writes straight into the padded output; the backward scatters
  each pair gradient into the two rows it touches (dZ_i += g·Z_j, dZ_j += g·Z_i). A NumPy variant (batched
  ``matmul`` plus a gather, the reference's form) was 4 to 8 times slower on 2 cores at both benchmark shapes
  (docs/kernels.md), so it is not kept.
- ``*_cuda``: one block per sample. Z is staged in shared memory a tile of D columns at a time (so D is not
  bounded by shared memory); each thread owns some pairs and adds each tile's partial dot into the output.
  The backward gives each thread one (i, d) of dZ, so a warp reads one row of G by broadcast and a row of the
  shared Z tile without bank conflicts.
"""
import functools
import math
import warnings

import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import Function
from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.backend import real_gpu as backend_real_gpu

from .chunks import chunk_size
from .gemm import matmul
from .mlp import PRECISIONS
from gpuemb.autograd.launch import kernel, stream_for, width

MAX_ROWS_CUDA = 128  # n = F + 1 the CUDA kernels take: the shared tile is [128, 33] (17 KiB in float32)
TILE_D = 32
# +1 column: rows i and i + 1 fall in different banks. The compiler takes a shared array's shape only as a
# constant, so the sum is made here: written in the kernel, only the simulator accepts it.
_SHARED_TILE = (MAX_ROWS_CUDA, TILE_D + 1)
_FAST = {"reassoc", "contract"}  # lets LLVM vectorise the dot reductions; no nan/inf assumptions


def pair_count(n, self_interaction=False):
    """How many pairs (i, j), i > j (i >= j with the diagonal), n rows give."""
    return n * (n + 1) // 2 if self_interaction else n * (n - 1) // 2


def output_width(F, D, self_interaction=False, pad_to=8):
    """The output's column count: D, then the pairs, rounded up to a multiple of ``pad_to``."""
    if pad_to < 1:
        raise ValueError(f"dot_interaction: pad_to={pad_to}; use 1 for no padding or a positive multiple")
    width = D + pair_count(F + 1, self_interaction)
    return -(-width // pad_to) * pad_to


def _check(bottom, emb):
    if bottom.ndim != 2 or emb.ndim != 3 or bottom.shape[0] != emb.shape[0] or bottom.shape[1] != emb.shape[2]:
        raise ValueError(f"dot_interaction: want bottom [B, D] and embeddings [B, F, D], "
                         f"got shapes {bottom.shape} and {emb.shape}")
    if bottom.dtype != emb.dtype:
        raise TypeError(f"dot_interaction: bottom is {bottom.dtype} but embeddings are {emb.dtype}; cast one")


# -- reference ---------------------------------------------------------------------------------------------------
def _pairs(n, self_interaction):
    return np.tril_indices(n, 0 if self_interaction else -1)


def dot_interaction_ref(bottom, emb, self_interaction=False, pad_to=8):
    """``[B, W]``: bottom ``[B, D]``, then the lower triangle of Z·Zᵀ, then zero padding."""
    B, F, D = emb.shape
    Z = np.concatenate([bottom[:, None, :], emb], axis=1)
    li, lj = _pairs(F + 1, self_interaction)
    out = np.zeros((B, output_width(F, D, self_interaction, pad_to)), dtype=emb.dtype)
    out[:, :D] = bottom
    out[:, D:D + li.size] = (Z @ Z.transpose(0, 2, 1))[:, li, lj]
    return out


def dot_interaction_backward_ref(gy, bottom, emb, self_interaction=False):
    """Gradients ``([B, D], [B, F, D])`` for bottom and embeddings from the output gradient ``gy [B, W]``."""
    B, F, D = emb.shape
    Z = np.concatenate([bottom[:, None, :], emb], axis=1)
    li, lj = _pairs(F + 1, self_interaction)
    G = np.zeros((B, F + 1, F + 1), dtype=gy.dtype)
    G[:, li, lj] = gy[:, D:D + li.size]
    gZ = (G + G.transpose(0, 2, 1)) @ Z
    return gy[:, :D] + gZ[:, 0], gZ[:, 1:]


# -- CPU ---------------------------------------------------------------------------------------------------------
@numba.njit(parallel=True, fastmath=_FAST, cache=True)
def _forward_cpu(bottom, emb, out, diag, chunk, zero):
    B, F, D = emb.shape
    n = F + 1
    W = out.shape[1]
    for c in numba.prange(-(-B // chunk)):
        Z = np.empty((n, D), dtype=emb.dtype)  # the sample's rows side by side, so the pair loop has one source
        for b in range(c * chunk, min(B, (c + 1) * chunk)):
            for d in range(D):
                Z[0, d] = bottom[b, d]
                out[b, d] = bottom[b, d]
            for f in range(F):
                for d in range(D):
                    Z[f + 1, d] = emb[b, f, d]
            p = D
            for i in range(1 - diag, n):
                j = 0
                while j + 4 <= i + diag:  # four pairs of row i at once: Z_i is loaded once for four dots
                    s0, s1, s2, s3 = zero, zero, zero, zero
                    for d in range(D):
                        z = Z[i, d]
                        s0 += z * Z[j, d]
                        s1 += z * Z[j + 1, d]
                        s2 += z * Z[j + 2, d]
                        s3 += z * Z[j + 3, d]
                    out[b, p], out[b, p + 1], out[b, p + 2], out[b, p + 3] = s0, s1, s2, s3
                    p += 4
                    j += 4
                for j in range(j, i + diag):
                    s = zero
                    for d in range(D):
                        s += Z[i, d] * Z[j, d]
                    out[b, p] = s
                    p += 1
            for q in range(p, W):
                out[b, q] = 0
    return out


def dot_interaction_cpu(bottom, emb, self_interaction=False, pad_to=8):
    B, F, D = emb.shape
    out = np.empty((B, output_width(F, D, self_interaction, pad_to)), dtype=emb.dtype)
    return _forward_cpu(np.ascontiguousarray(bottom), np.ascontiguousarray(emb), out, int(self_interaction),
                        chunk_size(B), emb.dtype.type(0))


@numba.njit(parallel=True, fastmath=_FAST, cache=True)
def _backward_cpu(gy, bottom, emb, g_bottom, g_emb, diag, chunk):
    B, F, D = emb.shape
    n = F + 1
    for c in numba.prange(-(-B // chunk)):
        Z = np.empty((n, D), dtype=emb.dtype)
        gZ = np.empty((n, D), dtype=emb.dtype)
        for b in range(c * chunk, min(B, (c + 1) * chunk)):
            for d in range(D):
                Z[0, d] = bottom[b, d]
                gZ[0, d] = 0
            for f in range(F):
                for d in range(D):
                    Z[f + 1, d] = emb[b, f, d]
                    gZ[f + 1, d] = 0
            p = D
            for i in range(1 - diag, n):
                for j in range(i + diag):
                    g = gy[b, p]
                    p += 1
                    for d in range(D):  # on the diagonal both lines add g·Z_i: the 2·g the symmetric sum asks
                        gZ[i, d] += g * Z[j, d]
                        gZ[j, d] += g * Z[i, d]
            for d in range(D):
                g_bottom[b, d] = gy[b, d] + gZ[0, d]
            for f in range(F):
                for d in range(D):
                    g_emb[b, f, d] = gZ[f + 1, d]
    return g_bottom, g_emb


def dot_interaction_backward_cpu(gy, bottom, emb, self_interaction=False):
    B, F, D = emb.shape
    g_bottom = np.empty((B, D), dtype=emb.dtype)
    g_emb = np.empty((B, F, D), dtype=emb.dtype)
    return _backward_cpu(np.ascontiguousarray(gy), np.ascontiguousarray(bottom), np.ascontiguousarray(emb),
                         g_bottom, g_emb, int(self_interaction), chunk_size(B))


# -- CUDA --------------------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def _tri_row(p):
    """The row i of pair index p in the strict lower triangle (p = i(i-1)/2 + j); sqrt, then exact fix-ups."""
    i = int((1.0 + math.sqrt(1.0 + 8.0 * p)) * 0.5)
    while i * (i - 1) // 2 > p:
        i -= 1
    while (i + 1) * i // 2 <= p:
        i += 1
    return i


@functools.cache
def _cuda_kernels(dtype):
    """The forward and backward kernels for one float dtype (the shared tile's type is fixed at compile time).

    float16 (mixed precision) stages float16 tiles and sums each dot in float32, rounding once per 32-column
    tile; this half variant has run only in numba's simulator so far, and been compiled to PTX, not run on a GPU."""
    nb_type = numba.from_dtype(np.dtype(dtype))
    acc = numba.float32 if np.dtype(dtype) == np.float16 else nb_type  # the type a dot is summed in
    zero = acc(0)

    def per_dtype(fn):  # launch.KERNELS is keyed by name: one per dtype, so the PTX test sees float32's and float16's
        fn.__qualname__ = f"{fn.__name__}[{np.dtype(dtype).name}]"
        return kernel(cache=False)(fn)

    @per_dtype
    def forward(bottom, emb, out, diag):
        b = cuda.blockIdx.x
        tid, nt = cuda.threadIdx.x, cuda.blockDim.x
        F, D = emb.shape[1], emb.shape[2]
        n = F + 1
        P = n * (n - 1) // 2 + diag * n
        zs = cuda.shared.array(_SHARED_TILE, nb_type)
        for k in range(tid, D, nt):
            out[b, k] = bottom[b, k]
        for k in range(D + P + tid, out.shape[1], nt):
            out[b, k] = zero
        for d0 in range(0, D, TILE_D):
            w = min(TILE_D, D - d0)
            for k in range(tid, n * w, nt):
                r = k // w
                c = k - r * w
                zs[r, c] = bottom[b, d0 + c] if r == 0 else emb[b, r - 1, d0 + c]
            cuda.syncthreads()
            for p in range(tid, P, nt):
                i = _tri_row(p)  # with the diagonal, pair (i, j) has the strict index of (i + 1, j)
                j = p - i * (i - 1) // 2
                i -= diag
                s = zero
                for c in range(w):
                    s += acc(zs[i, c]) * acc(zs[j, c])
                if d0 == 0:
                    out[b, D + p] = s
                else:
                    out[b, D + p] += s
            cuda.syncthreads()

    @per_dtype
    def backward(gy, bottom, emb, g_bottom, g_emb, diag):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        c, rows = tid % TILE_D, cuda.blockDim.x // TILE_D
        F, D = emb.shape[1], emb.shape[2]
        n = F + 1
        zs = cuda.shared.array(_SHARED_TILE, nb_type)
        for d0 in range(0, D, TILE_D):
            w = min(TILE_D, D - d0)
            for k in range(tid, n * w, cuda.blockDim.x):
                r = k // w
                cc = k - r * w
                zs[r, cc] = bottom[b, d0 + cc] if r == 0 else emb[b, r - 1, d0 + cc]
            cuda.syncthreads()
            if c < w:
                for i in range(tid // TILE_D, n, rows):
                    s = zero
                    for j in range(n):
                        hi, lo = max(i, j), min(i, j)
                        if hi == lo and diag == 0:
                            continue
                        g = acc(gy[b, D + (hi + diag) * (hi + diag - 1) // 2 + lo])
                        s += (g + g if hi == lo else g) * acc(zs[j, c])
                    if i == 0:
                        g_bottom[b, d0 + c] = gy[b, d0 + c] + s
                    else:
                        g_emb[b, i - 1, d0 + c] = s
            cuda.syncthreads()

    return forward, backward


def _check_cuda(emb):
    if emb.shape[1] + 1 > MAX_ROWS_CUDA:
        raise ValueError(f"dot_interaction (CUDA): F + 1 = {emb.shape[1] + 1} rows; the kernel's shared tile "
                         f"holds at most {MAX_ROWS_CUDA}")


def dot_interaction_cuda(bottom, emb, self_interaction=False, pad_to=8):
    _check_cuda(emb)
    B, F, D = emb.shape
    out = get_array_module(emb).empty((B, output_width(F, D, self_interaction, pad_to)), dtype=emb.dtype)
    forward, _ = _cuda_kernels(emb.dtype)
    if B:  # a block per sample and no sample guard: an empty batch has nothing to launch
        forward[B, width(128), stream_for(emb)](bottom, emb, out, int(self_interaction))
    return out


def dot_interaction_backward_cuda(gy, bottom, emb, self_interaction=False):
    _check_cuda(emb)
    xp = get_array_module(emb)
    g_bottom, g_emb = xp.empty(bottom.shape, dtype=emb.dtype), xp.empty(emb.shape, dtype=emb.dtype)
    _, backward = _cuda_kernels(emb.dtype)
    if emb.shape[0]:  # as in the forward: no launch for an empty batch
        launch = emb.shape[0], width(8 * TILE_D), stream_for(emb)
        backward[launch](gy, bottom, emb, g_bottom, g_emb, int(self_interaction))
    return g_bottom, g_emb


# -- dispatch and autograd ---------------------------------------------------------------------------------------
def dot_interaction(bottom, emb, self_interaction=False, pad_to=8):
    """``[B, W]`` = concat(bottom ``[B, D]``, lower triangle of Z·Zᵀ for Z = [bottom; emb ``[B, F, D]``], zeros)."""
    _check(bottom, emb)
    impl = dot_interaction_cuda if is_device_array(emb) else dot_interaction_cpu
    return impl(bottom, emb, self_interaction, pad_to)


def dot_interaction_backward(gy, bottom, emb, self_interaction=False):
    """Gradients ``([B, D], [B, F, D])`` of bottom and embeddings from the output gradient ``gy [B, W]``."""
    _check(bottom, emb)
    B, F, D = emb.shape
    if gy.ndim != 2 or gy.shape[0] != B or gy.shape[1] < D + pair_count(F + 1, self_interaction):
        raise ValueError(f"dot_interaction_backward: gradient of shape {gy.shape} is narrower than the output "
                         f"[{B}, >= {D + pair_count(F + 1, self_interaction)}] of embeddings {emb.shape}")
    impl = dot_interaction_backward_cuda if is_device_array(emb) else dot_interaction_backward_cpu
    return impl(gy, bottom, emb, self_interaction)


# -- the tensor cores: the reference's batched matmuls through cuBLASLt at a reduced compute type ------------------
REFUSED = {}  # precision -> why its batched matmul failed on this GPU (the kernels run instead); never on emulation


@functools.lru_cache(maxsize=None)
def _device_pairs(xp, device, n, self_interaction):
    """The pairs' (rows, columns) on ``device``, uploaded once: each step's forward and backward index with them."""
    return tuple(xp.asarray(a) for a in _pairs(n, self_interaction))


def _pairs_on(xp, n, self_interaction):
    return _device_pairs(xp, xp.cuda.Device().id, n, self_interaction)


def dot_interaction_gemm(bottom, emb, self_interaction, pad_to, precision):
    """``(out, Z)``: the forward as the reference writes it, Z·Zᵀ one batched matmul at ``precision`` (gemm.py)."""
    xp = get_array_module(emb)
    B, F, D = emb.shape
    Z = xp.concatenate([bottom[:, None, :], emb], axis=1)
    li, lj = _pairs_on(xp, F + 1, self_interaction)
    out = xp.zeros((B, output_width(F, D, self_interaction, pad_to)), dtype=emb.dtype)
    out[:, :D] = bottom
    out[:, D:D + li.size] = matmul(Z, Z.transpose(0, 2, 1), precision)[:, li, lj]
    return out, Z


def dot_interaction_gemm_backward(gy, Z, self_interaction, precision):
    """The gradients of ``dot_interaction_gemm``: dZ = (G + Gᵀ)·Z, one batched matmul at ``precision``."""
    xp = get_array_module(Z)
    B, n, D = Z.shape
    li, lj = _pairs_on(xp, n, self_interaction)
    G = xp.zeros((B, n, n), dtype=gy.dtype)
    G[:, li, lj] = gy[:, D:D + li.size]
    gZ = matmul(G + G.transpose(0, 2, 1), Z, precision)
    return gy[:, :D] + gZ[:, 0], gZ[:, 1:]


class DotInteraction(Function):
    """Autograd op: ``DotInteraction(self_interaction, pad_to, precision).apply(bottom, emb)``; gradients for both.

    precision "fp16" (a GPU only) runs the float16 kernels, which stage float16 tiles and sum each dot in float32,
    on float16 copies of the inputs; the output and the gradients come back in the inputs' dtype, so the op's
    boundary stays float32 like the MLPs'. "bf16" and "tf32" (a GPU only) run the reference's form instead: Z·Zᵀ
    and (G + Gᵀ)·Z as batched matmuls through cuBLASLt at COMPUTE_32F_FAST_16BF or FAST_TF32, on float32 arrays
    (``dot_interaction_gemm``): the tensor cores, at the price of a few more launches than the one kernel.
    """

    def __init__(self, self_interaction=False, pad_to=8, precision="fp32"):
        if precision not in PRECISIONS:
            *most, last = PRECISIONS
            raise ValueError(f"DotInteraction: precision={precision!r}; use {', '.join(most)} or {last}")
        self.self_interaction, self.pad_to = bool(self_interaction), int(pad_to)
        self.half = precision == "fp16"
        self.gemm = precision if precision in ("bf16", "tf32") else None

    def forward(self, bottom, emb):
        self.dtype = emb.dtype
        if self.gemm:
            _check(bottom, emb)
            if not is_device_array(emb):
                raise ValueError(f"DotInteraction: precision {self.gemm} runs on a GPU only; the CPU kernels compute "
                                 "in the inputs' dtype, so use precision='fp32' there")
            if self.gemm not in REFUSED:
                try:
                    y, self.Z = dot_interaction_gemm(bottom, emb, self.self_interaction, self.pad_to, self.gemm)
                    return y
                except Exception as e:  # cuBLASLt or nvmath refusing the batched layout: the kernels still run
                    if not backend_real_gpu():
                        raise
                    REFUSED[self.gemm] = f"{type(e).__name__}: {e}"
                    warnings.warn(f"DotInteraction: the batched {self.gemm} matmul failed ({REFUSED[self.gemm]}); "
                                  "the interaction computes in float32 on the CUDA cores from here on")
            self.gemm = None
        if self.half:
            if not is_device_array(emb):
                raise ValueError("DotInteraction: precision fp16 runs on a GPU only; the CPU kernels compute in "
                                 "the inputs' dtype, so use precision='fp32' there")
            bottom, emb = bottom.astype(np.float16), emb.astype(np.float16)
        self.bottom, self.emb = bottom, emb
        y = dot_interaction(bottom, emb, self.self_interaction, self.pad_to)
        return y.astype(self.dtype) if self.half else y

    def backward(self, gy):
        if self.gemm:
            return dot_interaction_gemm_backward(gy, self.Z, self.self_interaction, self.gemm)
        if self.half:
            gy = get_array_module(gy).ascontiguousarray(gy.astype(np.float16))
        g_bottom, g_emb = dot_interaction_backward(gy, self.bottom, self.emb, self.self_interaction)
        return (g_bottom.astype(self.dtype), g_emb.astype(self.dtype)) if self.half else (g_bottom, g_emb)
