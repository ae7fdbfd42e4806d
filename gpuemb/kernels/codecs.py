"""Wire codecs for the embedding all-to-all: fp32 (as is), fp16, bf16 and int8 with a per-row scale.

- int8: per row of ``x [N, D]``, ``scale = absmax / 127`` (float32, sent beside the row) and
  ``q = round(x · 127 / absmax)``, rounding half to even; decode is ``q · scale``. An all-zero row has scale 0 and
  decodes to zeros (no 0/0). The error is at most half a step, ``absmax / 254``, per element.
- bf16: the top 16 bits of the float32, rounded to nearest even, stored as uint16. NumPy has no bfloat16, so it
  is bit arithmetic on the uint32 view; a NaN stays a (quiet) NaN instead of rounding into infinity.
- fp16: ``astype(float16)``, which NumPy and CuPy already do in one pass; no kernel of ours would beat it.

Each codec has ``*_ref`` (NumPy), a numba CPU and a numba.cuda version and a dispatcher; ``encode(x, codec)``
and ``decode(parts, codec)`` pick a codec by name for the communication layer.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module, is_device_array

from gpuemb.autograd.launch import kernel, over, stream_for

CODECS = ("fp32", "fp16", "bf16", "int8")
_ROW_THREADS = 128  # the int8 kernel's block: one row, its absmax reduced in shared memory


def _check_float32(x, op, ndim=None):
    if x.dtype != np.float32 or ndim not in (None, x.ndim):
        raise TypeError(f"{op}: wants a {ndim or 'n'}-D float32 array, got {x.dtype} of shape {x.shape}")


# -- bf16 ----------------------------------------------------------------------------------------------------------
def _bf16_from_bits(u):
    """The bf16 bits of one float32 given as its uint32 bits (compiled for the CPU and the GPU)."""
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x0040  # keep NaN a NaN: set the quiet bit so no mantissa bit is lost to truncation
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


_bf16_from_bits_cpu = numba.njit(cache=True)(_bf16_from_bits)
_bf16_from_bits_gpu = cuda.jit(device=True)(_bf16_from_bits)


def bf16_encode_ref(x):
    """float32 → bf16 bits (uint16), round to nearest even."""
    u = x.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x0040, rounded).astype(np.uint16)


def bf16_decode_ref(h):
    """bf16 bits (uint16) → float32, exact."""
    return (h.astype(np.uint32) << 16).view(np.float32)


@numba.njit(parallel=True, cache=True)
def _bf16_encode_cpu(u, out):
    for i in numba.prange(u.size):
        out[i] = _bf16_from_bits_cpu(u[i])
    return out


@numba.njit(parallel=True, cache=True)
def _bf16_decode_cpu(h, out):
    for i in numba.prange(h.size):
        out[i] = np.uint32(h[i]) << 16
    return out


def bf16_encode_cpu(x):
    u = np.ascontiguousarray(x).view(np.uint32)
    return _bf16_encode_cpu(u.reshape(-1), np.empty(u.size, np.uint16)).reshape(x.shape)


def bf16_decode_cpu(h):
    out = _bf16_decode_cpu(np.ascontiguousarray(h).reshape(-1), np.empty(h.size, np.uint32))
    return out.view(np.float32).reshape(h.shape)


@kernel
def _bf16_encode_kernel(u, out):
    for i in range(cuda.grid(1), u.size, cuda.gridsize(1)):
        out[i] = _bf16_from_bits_gpu(u[i])


@kernel
def _bf16_decode_kernel(h, out):
    for i in range(cuda.grid(1), h.size, cuda.gridsize(1)):
        out[i] = numba.uint32(h[i]) << 16


def bf16_encode_cuda(x):
    u = get_array_module(x).ascontiguousarray(x).view(np.uint32).reshape(-1)
    out = get_array_module(x).empty(u.size, dtype=np.uint16)
    _bf16_encode_kernel[over(u.size, x)](u, out)
    return out.reshape(x.shape)


def bf16_decode_cuda(h):
    xp = get_array_module(h)
    out = xp.empty(h.size, dtype=np.uint32)
    _bf16_decode_kernel[over(h.size, h)](xp.ascontiguousarray(h).reshape(-1), out)
    return out.view(np.float32).reshape(h.shape)


def bf16_encode(x):
    """float32 → bf16 bits as uint16, round to nearest even."""
    _check_float32(x, "bf16_encode")
    return bf16_encode_cuda(x) if is_device_array(x) else bf16_encode_cpu(x)


def bf16_decode(h):
    """bf16 bits (uint16) → float32."""
    if h.dtype != np.uint16:
        raise TypeError(f"bf16_decode: wants uint16 bf16 bits, got {h.dtype}")
    return bf16_decode_cuda(h) if is_device_array(h) else bf16_decode_cpu(h)


# -- int8 with a per-row scale ----------------------------------------------------------------------------------------
def int8_encode_ref(x):
    """``(q int8 [N, D], scale float32 [N])`` with ``scale = absmax / 127`` per row."""
    absmax = np.abs(x).max(axis=1)
    safe = np.where(absmax > 0, absmax, np.float32(1))
    inv = np.where(absmax > 0, np.float32(127) / safe, np.float32(0))  # 127 / absmax, in float32 as the kernels do
    return np.rint(x * inv[:, None]).astype(np.int8), absmax / np.float32(127)


def int8_decode_ref(q, scale):
    """``q · scale`` per row, float32 ``[N, D]``."""
    return q.astype(np.float32) * scale[:, None]


@numba.njit(parallel=True, cache=True)
def _int8_encode_cpu(x, q, scale):
    N, D = x.shape
    for r in numba.prange(N):
        absmax = np.float32(0)
        for d in range(D):
            absmax = max(absmax, abs(x[r, d]))
        inv = np.float32(127) / absmax if absmax > 0 else np.float32(0)
        for d in range(D):
            q[r, d] = np.int8(np.rint(x[r, d] * inv))  # rint stays in float and vectorises; round() was 2.5x slower
        scale[r] = absmax / np.float32(127)
    return q, scale


@numba.njit(parallel=True, cache=True)
def _int8_decode_cpu(q, scale, out):
    N, D = q.shape
    for r in numba.prange(N):
        for d in range(D):
            out[r, d] = q[r, d] * scale[r]
    return out


def int8_encode_cpu(x):
    return _int8_encode_cpu(np.ascontiguousarray(x), np.empty(x.shape, np.int8), np.empty(x.shape[0], np.float32))


def int8_decode_cpu(q, scale):
    return _int8_decode_cpu(q, scale, np.empty(q.shape, np.float32))


@kernel
def _int8_encode_kernel(x, q, scale):
    r = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    D = x.shape[1]
    part = cuda.shared.array(_ROW_THREADS, numba.float32)
    m = numba.float32(0)
    for d in range(tid, D, _ROW_THREADS):
        m = max(m, abs(x[r, d]))
    part[tid] = m
    cuda.syncthreads()
    step = _ROW_THREADS // 2
    while step > 0:  # tree reduction of the row's absmax
        if tid < step:
            part[tid] = max(part[tid], part[tid + step])
        cuda.syncthreads()
        step //= 2
    absmax = part[0]
    inv = numba.float32(127) / absmax if absmax > 0 else numba.float32(0)
    for d in range(tid, D, _ROW_THREADS):
        q[r, d] = round(x[r, d] * inv)
    if tid == 0:
        scale[r] = absmax / numba.float32(127)


@kernel
def _int8_decode_kernel(q, scale, D, out):
    for k in range(cuda.grid(1), q.size, cuda.gridsize(1)):  # flat views: element k is in row k // D
        out[k] = q[k] * scale[k // D]


def int8_encode_cuda(x):
    xp = get_array_module(x)
    q, scale = xp.empty(x.shape, dtype=np.int8), xp.empty(x.shape[0], dtype=np.float32)
    if x.shape[0]:  # a block per row: with no rows there is nothing to launch (the kernel has no row guard)
        _int8_encode_kernel[x.shape[0], _ROW_THREADS, stream_for(x)](x, q, scale)
    return q, scale


def int8_decode_cuda(q, scale):
    xp = get_array_module(q)
    out = xp.empty(q.size, dtype=np.float32)
    _int8_decode_kernel[over(q.size, q)](xp.ascontiguousarray(q).reshape(-1), scale,
                                                                q.shape[1], out)
    return out.reshape(q.shape)


def int8_encode(x):
    """``(q int8 [N, D], scale float32 [N])``: each row quantized against its own absmax."""
    _check_float32(x, "int8_encode", 2)
    return int8_encode_cuda(x) if is_device_array(x) else int8_encode_cpu(x)


def int8_decode(q, scale):
    """float32 ``[N, D]`` from int8 rows and their scales."""
    if q.dtype != np.int8 or q.ndim != 2 or scale.shape != (q.shape[0],):
        raise TypeError(f"int8_decode: wants int8 [N, D] and float32 scales [N], got {q.dtype} {q.shape} "
                        f"and {scale.dtype} {scale.shape}")
    return int8_decode_cuda(q, scale) if is_device_array(q) else int8_decode_cpu(q, scale)


# -- by name -------------------------------------------------------------------------------------------------------
def encode(x, codec):
    """The wire parts of float32 ``x [N, D]`` under ``codec`` (one of CODECS), as a tuple of arrays."""
    _check_float32(x, f"encode({codec!r})", 2)
    if codec == "fp32":
        return (x,)
    if codec == "fp16":
        return (x.astype(np.float16),)
    if codec == "bf16":
        return (bf16_encode(x),)
    if codec == "int8":
        return int8_encode(x)
    raise ValueError(f"encode: unknown codec {codec!r}; use one of {', '.join(CODECS)}")


def decode(parts, codec):
    """float32 ``[N, D]`` back from the parts that ``encode(x, codec)`` gave."""
    if codec == "fp32":
        return parts[0]
    if codec == "fp16":
        return parts[0].astype(np.float32)
    if codec == "bf16":
        return bf16_decode(parts[0])
    if codec == "int8":
        return int8_decode(*parts)
    raise ValueError(f"decode: unknown codec {codec!r}; use one of {', '.join(CODECS)}")
