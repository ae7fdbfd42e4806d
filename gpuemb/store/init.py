"""Initial weights of new keys, drawn from (seed, key, column) only, so a key's row never depends on which batch
or in what order it arrived, nor on which shard or device inserts it.

Element (key, d), attempt a, takes one Philox4x32-10 draw: counter ``(key low, key high, d, a)``, key
``(seed low, seed high)`` (``gpuemb.kernels.philox``). Its first two words make two uniforms in (0, 1):
``uniform`` uses the first (``scale·(2u-1)``), ``normal`` both through Box-Muller (``scale·z``), and
``truncated_normal`` draws attempts until ``|z| < 2`` (about 1.05 draws on average). Computed in float64 by numba,
then cast to the table's dtype. The element's math is written once (``_element``) and compiled for numba's CPU
target and as a CUDA device function, so device keys get their rows drawn on the device from the same stream.
Uniform rows are then equal bit for bit on every device; normal ones take ``log`` and ``cos``, which a GPU's math
library may round differently in the last float64 bit, so a row may differ in rare elements' last float32 bit.
"""
import math

import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.launch import blocks_for, kernel, stream_for
from gpuemb.kernels.philox import philox4x32_10_cpu, philox4x32_10_device, split64

KINDS = {"zeros": 0, "uniform": 1, "normal": 2, "truncated_normal": 3}
_INV32 = 1.0 / 4294967296.0
_TRUNCATE = 2.0  # truncated_normal cuts at this many std, as TensorFlow's does


def _element_for(jit, philox):
    """``element(key, d, kind, scale, s0, s1)`` compiled by ``jit`` around ``philox`` (its CPU or device twin): the
    initial value (float64) of element (key, d), one Philox draw, more for ``truncated_normal``. One body, two
    targets (``key_index_kernels._probes`` does the same)."""
    def element(key, d, kind, scale, s0, s1):
        mask = np.uint64(0xFFFFFFFF)
        attempt = 0
        while True:
            w0, w1, _, _ = philox(key & mask, key >> np.uint64(32), np.uint64(d), np.uint64(attempt), s0, s1)
            u1, u2 = (float(w0) + 0.5) * _INV32, (float(w1) + 0.5) * _INV32
            if kind == 1:
                return scale * (2.0 * u1 - 1.0)
            z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            if kind != 3 or abs(z) < _TRUNCATE:
                return scale * z
            attempt += 1
    return jit(element)


_element_cpu = _element_for(numba.njit(inline="always"), philox4x32_10_cpu)
_element_gpu = _element_for(cuda.jit(device=True), philox4x32_10_device)


@numba.njit(parallel=True, cache=True)
def _draw(keys, kind, scale, s0, s1, out):
    D = out.shape[1]
    for i in numba.prange(keys.shape[0]):
        for d in range(D):
            out[i, d] = _element_cpu(keys[i], d, kind, scale, s0, s1)


@kernel
def _draw_kernel(keys, kind, scale, s0, s1, out):
    k = cuda.grid(1)
    D = out.shape[1]
    if k < keys.shape[0] * D:
        i = k // D
        d = k - i * D
        out[i, d] = _element_gpu(keys[i], d, kind, scale, s0, s1)


def initial_weights(initializer, keys, dim, dtype="float32"):
    """The initial weights ``[n, dim]`` (``dtype``) of ``keys [n]`` (int64) under ``initializer``: NumPy for host
    keys, on the device (one thread per element, nothing read back) for device keys."""
    xp = get_array_module(keys)
    keys = xp.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
    out = xp.zeros((keys.shape[0], dim), np.float64)
    kind = KINDS[initializer.kind]
    if kind:
        s0, s1 = split64(initializer.seed)
        scale = initializer.scale_for(dim)
        if is_device_array(keys):
            _draw_kernel[blocks_for(out.size), 256, stream_for(out)](keys.view(np.uint64), kind, scale, s0, s1, out)
        else:
            _draw(keys.view(np.uint64), kind, scale, s0, s1, out)
    return out.astype(dtype)
