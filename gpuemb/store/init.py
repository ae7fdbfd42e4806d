"""Initial weights of new keys, drawn from (seed, key, column) only, so a key's row never depends on which batch
or in what order it arrived, nor on which shard or device inserts it.

Philox4x32-10 (``gpuemb.kernels.philox``) with key ``(seed low, seed high)`` gives four 32-bit words a call, each
made a uniform in (0, 1). Two streams (``Initializer.draw``):

- **draw 2** (the default): the columns go in groups of four. Group g of a key, attempt a, is one call, counter
  ``(key low, key high, g, a)``: ``uniform`` takes column 4g+j from word j (``scale·(2u-1)``); ``normal`` makes
  two Box-Muller pairs, words 0-1 and 2-3, columns 4g and 4g+1 from the first pair's cosine and sine, 4g+2 and
  4g+3 from the second's. A quarter of draw 1's Philox calls, and half its logarithms.
- **draw 1** (gpuemb before 2026-11-28, kept so that runs and bundles made then go on drawing as they did): one
  call per element, counter ``(key low, key high, d, a)``; ``uniform`` takes word 0, ``normal`` words 0 and 1
  through Box-Muller's cosine.

``truncated_normal`` redraws an element, with attempt a + 1 at the same place of its group, while ``|z| >= 2``
(about 1.05 draws on average). Computed in float64 by numba, then cast to the table's dtype. The math is written
once (``_group_for``) and compiled for numba's CPU target and as a CUDA device function, so device keys get their
rows drawn on the device from the same stream. Uniform rows are then equal bit for bit on every device; normal
ones take ``log``, ``cos`` and ``sin``, which a GPU's math library may round differently in the last float64 bit,
so a row may differ in rare elements' last float32 bit.
"""
import math

import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.launch import kernel, over
from gpuemb.kernels.philox import philox4x32_10_cpu, philox4x32_10_device, split64

KINDS = {"zeros": 0, "uniform": 1, "normal": 2, "truncated_normal": 3}
_INV32 = 1.0 / 4294967296.0
_TRUNCATE = 2.0  # truncated_normal cuts at this many std, as TensorFlow's does


def _group_for(jit, philox):
    """``group(key, g, attempt, draw, kind, s0, s1)`` compiled by ``jit`` around ``philox`` (its CPU or device
    twin): four float64 values before ``scale``, one Philox call. Draw 2: the elements of columns 4g to 4g+3.
    Draw 1: element g (a column) in all four places. One body, two targets (``key_index_kernels._probes`` does the
    same)."""
    def group(key, g, attempt, draw, kind, s0, s1):
        mask = np.uint64(0xFFFFFFFF)
        w0, w1, w2, w3 = philox(key & mask, key >> np.uint64(32), np.uint64(g), np.uint64(attempt), s0, s1)
        u0, u1 = (float(w0) + 0.5) * _INV32, (float(w1) + 0.5) * _INV32
        u2, u3 = (float(w2) + 0.5) * _INV32, (float(w3) + 0.5) * _INV32
        if kind == 1:
            if draw == 1:
                u1 = u2 = u3 = u0
            return 2.0 * u0 - 1.0, 2.0 * u1 - 1.0, 2.0 * u2 - 1.0, 2.0 * u3 - 1.0
        r, t = math.sqrt(-2.0 * math.log(u0)), 2.0 * math.pi * u1
        z0 = r * math.cos(t)
        if draw == 1:
            return z0, z0, z0, z0
        r2, t2 = math.sqrt(-2.0 * math.log(u2)), 2.0 * math.pi * u3
        return z0, r * math.sin(t), r2 * math.cos(t2), r2 * math.sin(t2)
    return jit(group)


def _cell_for(jit, group):
    """``cell(key, g, j, draw, kind, s0, s1, first)``: place j of group g, given ``first`` (attempt 0's value
    there): redrawn at attempts 1, 2, ... while a truncated normal's ``|z| >= 2``."""
    def cell(key, g, j, draw, kind, s0, s1, first):
        z, attempt = first, 0
        while kind == 3 and abs(z) >= _TRUNCATE:
            attempt += 1
            z = group(key, g, attempt, draw, kind, s0, s1)[j]
        return z
    return jit(cell)


_group_cpu = _group_for(numba.njit(inline="always"), philox4x32_10_cpu)
_group_gpu = _group_for(cuda.jit(device=True), philox4x32_10_device)
_cell_cpu = _cell_for(numba.njit(inline="always"), _group_cpu)
_cell_gpu = _cell_for(cuda.jit(device=True), _group_gpu)


def _width(draw):
    """The columns one Philox call gives under ``draw``."""
    return 4 if draw == 2 else 1


@numba.njit(parallel=True, cache=True)
def _draw(keys, draw, kind, scale, s0, s1, out):
    D = out.shape[1]
    width = 4 if draw == 2 else 1
    for i in numba.prange(keys.shape[0]):
        for g in range((D + width - 1) // width):
            v = _group_cpu(keys[i], g, 0, draw, kind, s0, s1)
            for j in range(min(width, D - g * width)):
                out[i, g * width + j] = scale * _cell_cpu(keys[i], g, j, draw, kind, s0, s1, v[j])


@kernel
def _draw_kernel(keys, draw, kind, scale, s0, s1, out):
    D = out.shape[1]
    width = 4 if draw == 2 else 1
    groups = (D + width - 1) // width
    for k in range(cuda.grid(1), keys.shape[0] * groups, cuda.gridsize(1)):
        i = k // groups
        g = k - i * groups
        v = _group_gpu(keys[i], g, 0, draw, kind, s0, s1)
        for j in range(min(width, D - g * width)):
            out[i, g * width + j] = scale * _cell_gpu(keys[i], g, j, draw, kind, s0, s1, v[j])


def initial_weights(initializer, keys, dim, dtype="float32"):
    """The initial weights ``[n, dim]`` (``dtype``) of ``keys [n]`` (int64) under ``initializer``: numba's CPU
    kernel for host keys, on the device (one thread per Philox call, nothing read back) for device keys."""
    xp = get_array_module(keys)
    keys = xp.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
    kind = KINDS[initializer.kind]
    # The kernels store float32 and float64 rows as they are drawn (each float64 rounded to nearest once, as astype
    # would): a float64 copy beside a float32 table tripled the bytes this wrote, and cost as much as the draw.
    direct = np.dtype(dtype) in (np.float32, np.float64)
    out = (xp.empty if kind else xp.zeros)((keys.shape[0], dim), dtype if direct else np.float64)
    if kind:
        s0, s1 = split64(initializer.seed)
        scale = initializer.scale_for(dim)
        if is_device_array(keys):
            groups = keys.shape[0] * -(-dim // _width(initializer.draw))
            _draw_kernel[over(groups, out)](keys.view(np.uint64), initializer.draw, kind,
                                                                     scale, s0, s1, out)
        else:
            _draw(keys.view(np.uint64), initializer.draw, kind, scale, s0, s1, out)
    return out if direct else out.astype(dtype)
