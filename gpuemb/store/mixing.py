"""Keys of several key spaces in one: each feature's (or table's) keys mixed with its index, and back.

A shared table holds the keys of F features, and a store holds the keys of the T tables it batches (``table.py``),
in one 64-bit key space: key k of space s becomes splitmix64's finaliser of ``k + (s + 1)·golden``. Within a
space the map is a bijection, so no two keys meet; across spaces a collision has odds of about 2**-64 a pair. The
finaliser is itself a bijection, so a store that knows a key's space (it keeps it per row) gets the key back
(``unmixed``): exports, snapshots and initial rows see each table's own keys.

Both directions are written once (``_mix``) and run as NumPy array code on the host and as one CUDA kernel on
the device, where the dozen array calls they take would each be a launch.
"""
import numpy as np
from numba import cuda

from gpuemb.autograd import backend
from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.launch import kernel, over
from gpuemb.io.hashing import GOLDEN

_U = np.uint64
_S27, _S30, _S31, _S54, _S60, _S62 = _U(27), _U(30), _U(31), _U(54), _U(60), _U(62)
_M1, _M2 = _U(0xBF58476D1CE4E5B9), _U(0x94D049BB133111EB)
_M1_INV, _M2_INV = _U(pow(0xBF58476D1CE4E5B9, -1, 1 << 64)), _U(pow(0x94D049BB133111EB, -1, 1 << 64))


def _mix(z, step, invert):
    """``z`` (uint64) of the space whose ``step`` is ``space + 1`` (uint64): mixed, or (``invert``) unmixed."""
    if invert:  # each ``x ^ (x >> s)`` undone by the xor of its shifts by s, 2s, ... under 64
        z = (z ^ (z >> _S31) ^ (z >> _S62)) * _M2_INV
        z = (z ^ (z >> _S27) ^ (z >> _S54)) * _M1_INV
        z = z ^ (z >> _S30) ^ (z >> _S60)
        return z - step * GOLDEN
    z = z + step * GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


_mix_device = cuda.jit(device=True)(_mix)


@kernel
def _mix_kernel(keys, spaces, invert, out):
    for i in range(cuda.grid(1), keys.shape[0], cuda.gridsize(1)):
        out[i] = _mix_device(keys[i], np.uint64(spaces[i]) + np.uint64(1), invert)


def _mixed(keys, space, invert):
    xp = get_array_module(keys, space)
    keys = keys.astype(np.int64, copy=False) if is_device_array(keys) else np.asarray(keys, np.int64)
    if is_device_array(keys):
        spaces = xp.broadcast_to(xp.asarray(space, dtype=np.int32), keys.shape)
        flat, spaces = keys.reshape(-1), xp.ascontiguousarray(spaces.astype(np.int32, copy=False)).reshape(-1)
        out = xp.empty(flat.shape[0], np.uint64)
        _mix_kernel[over(flat.shape[0], flat)](flat.view(np.uint64), spaces, invert, out)
        return out.view(np.int64).reshape(keys.shape)
    step = _U(space + 1) if np.isscalar(space) else np.asarray(space).astype(np.uint64) + _U(1)
    with np.errstate(over="ignore"):  # the hash wraps around 2**64 on purpose
        return np.ascontiguousarray(_mix(keys.view(np.uint64), step, invert)).view(np.int64)


def feature_keys(keys, feature):
    """``keys`` (int64) of feature ``feature`` moved into its own part of a shared key space; ``feature`` may be an
    array that broadcasts against ``keys`` (``np.arange(F)`` for ``keys [B, F]``)."""
    return _mixed(keys, feature, False)


def unmixed(keys, feature):
    """The inverse of ``feature_keys``: the keys of feature (or table) ``feature`` that ``keys`` were mixed from."""
    return _mixed(keys, feature, True)
