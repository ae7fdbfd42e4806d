"""Initial weights of new keys, drawn from (seed, key, column) only, so a key's row never depends on which batch
or in what order it arrived, nor on which shard or device inserts it.

Element (key, d), attempt a, takes one Philox4x32-10 draw: counter ``(key low, key high, d, a)``, key
``(seed low, seed high)`` (``gpuemb.kernels.philox``). Its first two words make two uniforms in (0, 1):
``uniform`` uses the first (``scale·(2u-1)``), ``normal`` both through Box-Muller (``scale·z``), and
``truncated_normal`` draws attempts until ``|z| < 2`` (about 1.05 draws on average). Computed in float64 by numba,
then cast to the table's dtype.
"""
import math

import numba
import numpy as np

from gpuemb.kernels.philox import philox4x32_10_cpu, split64

KINDS = {"zeros": 0, "uniform": 1, "normal": 2, "truncated_normal": 3}
_INV32 = 1.0 / 4294967296.0
_TRUNCATE = 2.0  # truncated_normal cuts at this many std, as TensorFlow's does


@numba.njit(cache=True)
def _uniforms(key, d, attempt, s0, s1):
    """Two uniforms in (0, 1) for element (key, d), attempt ``attempt``."""
    mask = np.uint64(0xFFFFFFFF)
    w0, w1, _, _ = philox4x32_10_cpu(key & mask, key >> np.uint64(32), np.uint64(d), np.uint64(attempt), s0, s1)
    return (float(w0) + 0.5) * _INV32, (float(w1) + 0.5) * _INV32


@numba.njit(parallel=True, cache=True)
def _draw(keys, kind, scale, s0, s1, out):
    D = out.shape[1]
    for i in numba.prange(keys.shape[0]):
        for d in range(D):
            u1, u2 = _uniforms(keys[i], d, 0, s0, s1)
            if kind == 1:
                out[i, d] = scale * (2.0 * u1 - 1.0)
                continue
            z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            attempt = 0
            while kind == 3 and abs(z) >= _TRUNCATE:
                attempt += 1
                u1, u2 = _uniforms(keys[i], d, attempt, s0, s1)
                z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            out[i, d] = scale * z


def initial_weights(initializer, keys, dim, dtype="float32"):
    """The initial weights ``[n, dim]`` (NumPy, ``dtype``) of ``keys [n]`` (int64) under ``initializer``."""
    keys = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
    out = np.zeros((keys.shape[0], dim), np.float64)
    kind = KINDS[initializer.kind]
    if kind:
        s0, s1 = split64(initializer.seed)
        _draw(keys.view(np.uint64), kind, initializer.scale_for(dim), s0, s1, out)
    return out.astype(dtype)
