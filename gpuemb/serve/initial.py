"""The initial weights of keys a bundle's table never saw: the same draw as ``gpuemb.store.init``, in NumPy.

The store's module launches numba and CUDA kernels through the training backend, which the inference runtime does
not load; this is its definition written on arrays, for both of its streams (``Initializer.draw``): draw 2,
element (key, 4g + j) at attempt a from word j of ``philox4x32_10(key low, key high, g, a; seed low, seed high)``
(normals from the Box-Muller pairs of words 0-1 and 2-3, cosine then sine), and draw 1, element (key, d) from
words 0 (and 1) of the call at counter d; made uniform in (0, 1), then ``scale·(2u-1)`` or ``scale·z`` (redrawn
while ``|z| >= 2`` for the truncated normal), in float64, cast to the table's dtype.
``tests/gpuemb/serve/test_initial.py`` checks it equals the store's: bit for bit in float32 and float16; a float64
table's normal draws within an ulp, since NumPy and numba may round ``log``, ``cos`` and ``sin`` otherwise in the
last bit.
"""
import numpy as np

from gpuemb.kernels.philox import philox4x32_10

KINDS = ("zeros", "uniform", "normal", "truncated_normal")
DRAWS = (1, 2)  # the store's (gpuemb.store.options.DRAWS), which this runtime does not import; a test holds them equal
_INV32 = 1.0 / 4294967296.0
_TRUNCATE = 2.0
_MASK = np.uint64(0xFFFFFFFF)


def _values(keys, dim, attempt, seed, draw, kind):
    """``[n, dim]`` float64 before the scale: every element at ``attempt``, as ``init._group_for`` makes them."""
    k = keys.view(np.uint64)[:, None]
    width = 4 if draw == 2 else 1
    groups = -(-dim // width)
    g = np.broadcast_to(np.arange(groups, dtype=np.uint64), (keys.size, groups))
    s = np.uint64(seed)
    words = philox4x32_10(k & _MASK, k >> np.uint64(32), g, np.uint64(attempt), s & _MASK, s >> np.uint64(32))
    u = [(w.astype(np.float64) + 0.5) * _INV32 for w in words]
    if kind == "uniform":
        parts = [2.0 * x - 1.0 for x in u[:width]]
    else:
        r, t = np.sqrt(-2.0 * np.log(u[0])), 2.0 * np.pi * u[1]
        parts = [r * np.cos(t)]
        if draw == 2:
            r2, t2 = np.sqrt(-2.0 * np.log(u[2])), 2.0 * np.pi * u[3]
            parts += [r * np.sin(t), r2 * np.cos(t2), r2 * np.sin(t2)]
    return np.stack(parts, axis=2).reshape(keys.size, groups * width)[:, :dim]


def initial_weights(init, keys, dim, dtype="float32"):
    """``[n, dim]`` of ``keys [n]`` (int64) under ``init``, a dict ``{kind, scale, seed, draw}`` as a manifest
    holds it; ``scale`` None is ``1/sqrt(dim)``; no ``draw`` is draw 1 (a bundle of version 2)."""
    keys = np.ascontiguousarray(keys, np.int64).reshape(-1)
    kind, seed, draw = init["kind"], int(init["seed"]), init.get("draw", 1)
    scale = 1.0 / np.sqrt(dim) if init.get("scale") is None else float(init["scale"])
    if kind == "zeros" or not keys.size:
        return np.zeros((keys.size, dim), dtype)
    z = _values(keys, dim, 0, seed, draw, kind)
    attempt = 0
    while kind == "truncated_normal" and (redraw := np.abs(z) >= _TRUNCATE).any():
        attempt += 1
        rows = np.flatnonzero(redraw.any(axis=1))
        again = redraw[rows]
        z[rows] = np.where(again, _values(keys[rows], dim, attempt, seed, draw, kind), z[rows])
    return (scale * z).astype(dtype)
