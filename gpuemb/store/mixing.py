"""Keys of several key spaces in one: each feature's (or table's) keys mixed with its index, and back.

A shared table holds the keys of F features, and a store holds the keys of the T tables it batches (``table.py``),
in one 64-bit key space: key k of space s becomes splitmix64's finaliser of ``k + (s + 1)·golden``. Within a
space the map is a bijection, so no two keys meet; across spaces a collision has odds of about 2**-64 a pair. The
finaliser is itself a bijection, so a store that knows a key's space (it keeps it per row) gets the key back
(``unmixed``): exports, snapshots and initial rows see each table's own keys.
"""
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import get_array_module
from gpuemb.io.hashing import GOLDEN, splitmix64_finalizer

_U = np.uint64
_MASK = (1 << 64) - 1
# The finaliser's multipliers, inverted modulo 2**64, for its inverse.
_M1_INV, _M2_INV = _U(pow(0xBF58476D1CE4E5B9, -1, 1 << 64)), _U(pow(0x94D049BB133111EB, -1, 1 << 64))


def _step(space):
    """``space + 1`` as uint64, for a scalar or an array of spaces."""
    return np.uint64(space + 1) if np.isscalar(space) else space.astype(np.uint64) + np.uint64(1)


def feature_keys(keys, feature):
    """``keys`` (int64) of feature ``feature`` moved into its own part of a shared key space; ``feature`` may be an
    array that broadcasts against ``keys`` (``np.arange(F)`` for ``keys [B, F]``)."""
    xp = get_array_module(keys, feature)
    keys = keys.astype(np.int64, copy=False) if backend.is_device_array(keys) else np.asarray(keys, np.int64)
    with np.errstate(over="ignore"):  # the hash wraps around 2**64 on purpose, on either device
        z = keys.view(np.uint64) + _step(feature) * GOLDEN
        return xp.ascontiguousarray(splitmix64_finalizer(z)).view(np.int64)


def _unshift(z, s):
    """The inverse of ``z ^ (z >> s)`` for ``s >= 22``: at most three terms."""
    out = z ^ (z >> _U(s))
    return out ^ (z >> _U(2 * s)) if 2 * s < 64 else out


def unmixed(keys, feature):
    """The inverse of ``feature_keys``: the keys of feature (or table) ``feature`` that ``keys`` were mixed from."""
    xp = get_array_module(keys, feature)
    with np.errstate(over="ignore"):
        z = keys.astype(np.int64, copy=False).view(np.uint64)
        z = _unshift(z, 31) * _M2_INV
        z = _unshift(z, 27) * _M1_INV
        z = _unshift(z, 30)
        return xp.ascontiguousarray(z - _step(feature) * GOLDEN).view(np.int64)
