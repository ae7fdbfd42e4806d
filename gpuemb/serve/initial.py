"""The initial weights of keys a bundle's table never saw: the same draw as ``gpuemb.store.init``, in NumPy.

The store's module launches numba and CUDA kernels through the training backend, which the inference runtime does
not load; this is its definition written on arrays: element (key, d), attempt a, is word 0 (and 1) of
``philox4x32_10(key low, key high, d, a; seed low, seed high)``, made uniform in (0, 1), then ``scale·(2u-1)``,
or Box-Muller's ``scale·z`` (redrawn while ``|z| >= 2`` for the truncated normal), in float64, cast to the table's
dtype. ``tests/gpuemb/serve/test_initial.py`` checks it equals the store's: bit for bit in
float32 and float16; a float64 table's normal draws within an ulp, since NumPy and numba may round ``log`` and ``cos``
otherwise in the last bit.
"""
import numpy as np

from gpuemb.kernels.philox import philox4x32_10

KINDS = ("zeros", "uniform", "normal", "truncated_normal")
_INV32 = 1.0 / 4294967296.0
_TRUNCATE = 2.0
_MASK = np.uint64(0xFFFFFFFF)


def _uniforms(keys, dim, attempt, seed):
    k = keys.view(np.uint64)[:, None]
    d = np.broadcast_to(np.arange(dim, dtype=np.uint64), (keys.size, dim))
    s = np.uint64(seed)
    w0, w1, _, _ = philox4x32_10(k & _MASK, k >> np.uint64(32), d, np.uint64(attempt), s & _MASK,
                                 s >> np.uint64(32))
    return (w0.astype(np.float64) + 0.5) * _INV32, (w1.astype(np.float64) + 0.5) * _INV32


def _normal(u1, u2):
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def initial_weights(init, keys, dim, dtype="float32"):
    """``[n, dim]`` of ``keys [n]`` (int64) under ``init``, a dict ``{kind, scale, seed}`` as a manifest holds it;
    ``scale`` None is ``1/sqrt(dim)``."""
    keys = np.ascontiguousarray(keys, np.int64).reshape(-1)
    kind, seed = init["kind"], int(init["seed"])
    scale = 1.0 / np.sqrt(dim) if init.get("scale") is None else float(init["scale"])
    if kind == "zeros" or not keys.size:
        return np.zeros((keys.size, dim), dtype)
    u1, u2 = _uniforms(keys, dim, 0, seed)
    if kind == "uniform":
        return (scale * (2.0 * u1 - 1.0)).astype(dtype)
    z = _normal(u1, u2)
    attempt = 0
    while kind == "truncated_normal" and (redraw := np.abs(z) >= _TRUNCATE).any():
        attempt += 1
        rows = np.flatnonzero(redraw.any(axis=1))
        v1, v2 = _uniforms(keys[rows], dim, attempt, seed)
        again = redraw[rows]
        z[rows] = np.where(again, _normal(v1, v2), z[rows])
    return (scale * z).astype(dtype)
