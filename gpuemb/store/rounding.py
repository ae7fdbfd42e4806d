"""Stochastic rounding of float32 weights to float16, drawn from (seed, key, step, column) only (docs/store.md,
"float16 rows").

Round-to-nearest loses every update smaller than half a float16 spacing: a weight near 1 has a spacing of 2**-10,
so an update under about 5e-4 leaves it where it was, step after step. Stochastic rounding rounds ``x`` up to the
next float16 ``hi`` with probability ``(x - lo) / (hi - lo)`` and down to ``lo`` otherwise, so the stored weight
equals ``x`` in expectation and small updates add up.

The random bits come from a counter, not a stream with state, so a row's value still depends on its inputs alone:
two runs with one seed are equal, a resumed run equals an unbroken one, a tiered table equals a device one, and
the CPU equals the GPU. Element (key, column c) of a row whose update count after this update is ``step`` takes
word ``c % 4`` of one Philox4x32-10 draw: counter ``(key low, key high, TAG | c // 4, step)``, key ``(seed low,
seed high)`` (``gpuemb.kernels.philox``). ``TAG`` keeps the draws apart from the initializer's, whose third word is
a column below 2**31 (``init.py``). The column is the whole row's, so a column shard rounds as the whole table.

``stochastic_round_ref`` defines the op in NumPy, in float64 from the two neighbours. The kernels compute the same
bits with integers alone (the element written once, ``_rounded``): a float32 ``x`` is ``q`` float16 spacings
plus a remainder, and ``q`` is rounded up when the 32 random bits are below the remainder scaled to 2**32
(rounded up: the same comparison, bit for bit). Past
float16's largest value, 65504, the next value up is inf, taken as 2**16: an ``x`` at or beyond it is inf.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import is_device_array
from gpuemb.autograd.launch import kernel, over
from gpuemb.kernels.philox import philox4x32_10, philox4x32_10_cpu, philox4x32_10_device, split64

ROUNDINGS = ("nearest", "stochastic")  # how float32 weights are rounded to float16 rows
TAG = 0x80000000

# uint64 constants: numba types a plain int as int64, and int64 with uint64 makes float64
_U = np.uint64
_SIGN, _ABS, _INF32, _MANT = _U(0x8000), _U(0x7FFFFFFF), _U(0x7F800000), _U(0x7FFFFF)
_INF16, _NAN16, _HIDDEN, _LOW13, _ONE = _U(0x7C00), _U(0x7E00), _U(0x800000), _U(0x1FFF), _U(1)
_E_INF, _E_NORMAL, _BIAS, _E_SUB = _U(143), _U(113), _U(112), _U(126)  # float32 exponents: 2**16, 2**-14; 127-15
_U10, _U13, _U16, _U19, _U23, _U32, _U63, _U2, _U3 = (_U(v) for v in (10, 13, 16, 19, 23, 32, 63, 2, 3))
_MASK32, _TAG = _U(0xFFFFFFFF), _U(TAG)


def _rounded(b, r):
    """The float16 bits of the float32 bits ``b``, rounded up when the 32 random bits ``r`` are below the
    remainder (all uint64)."""
    sign = (b >> _U16) & _SIGN
    a = b & _ABS
    if a > _INF32:
        return sign | _NAN16
    e = a >> _U23
    if e >= _E_INF:  # |x| >= 2**16, inf included
        return sign | _INF16
    if e >= _E_NORMAL:  # a float16 normal: 13 bits drop
        q = ((e - _BIAS) << _U10) | ((a & _MANT) >> _U13)
        rem = (a & _LOW13) << _U19
    else:  # a float16 subnormal: counted in units of 2**-24
        m = (a & _MANT) | (_HIDDEN if e > 0 else _U(0))
        shift = _E_SUB - (e if e > 0 else _ONE)
        if shift > _U63:
            shift = _U63
        q = m >> shift
        # the remainder scaled to 2**32, rounded up as the reference's float64 comparison is: below 2**64, as m < 2**24
        rem = (((m - (q << shift)) << _U32) + (_ONE << shift) - _ONE) >> shift
    return sign | (q + _ONE if r < rem else q)


_rounded_cpu = numba.njit(inline="always")(_rounded)
_rounded_gpu = cuda.jit(device=True)(_rounded)


def _groups(first, D):
    """The groups of 4 whole-row columns that columns ``[first, first + D)`` fall in: ``range(g0, g1)``."""
    return first // 4, (first + D + 3) // 4


@numba.njit(parallel=True, cache=True)
def _round_cpu(bits, keys, steps, s0, s1, first, g0, g1, out):
    D = bits.shape[1]
    for i in numba.prange(bits.shape[0]):
        k, t = keys[i], _U(steps[i])
        for g in range(g0, g1):
            words = philox4x32_10_cpu(k & _MASK32, k >> _U32, _TAG | _U(g), t, s0, s1)
            for j in range(4):
                d = 4 * g + j - first
                if 0 <= d < D:
                    out[i, d] = _rounded_cpu(_U(bits[i, d]), words[j])


@kernel
def _round_kernel(bits, keys, steps, s0, s1, first, g0, g1, out):
    G = g1 - g0
    for t in range(cuda.grid(1), bits.shape[0] * G, cuda.gridsize(1)):
        i = t // G
        g = g0 + t - i * G
        k = keys[i]
        words = philox4x32_10_device(k & _MASK32, k >> _U32, _TAG | _U(g), _U(steps[i]), s0, s1)
        D = bits.shape[1]
        for j in range(4):
            d = 4 * g + j - first
            if 0 <= d < D:
                out[i, d] = _rounded_gpu(_U(bits[i, d]), words[j])


def stochastic_round(x, keys, steps, seed, out, first=0):
    """Write into ``out [n, D]`` (float16) the stochastic rounding of ``x [n, D]`` (float32), rows of ``keys [n]``
    (int64) after their update ``steps [n]``, under ``seed``; ``first``: the whole row's column of ``x``'s first
    one. On the device of ``x`` (one thread per row and group of 4 columns there), reading nothing back."""
    n, D = x.shape
    bits, dst = x.view(np.uint32), out.view(np.uint16)
    keys = keys.view(np.uint64)
    s0, s1 = split64(seed)
    g0, g1 = _groups(first, D)
    if is_device_array(x):
        _round_kernel[over(n * (g1 - g0), x)](bits, keys, steps, s0, s1, first, g0, g1, dst)
    elif n:
        _round_cpu(bits, keys, steps, s0, s1, first, g0, g1, dst)
    return out


def random_words_ref(keys, steps, seed, D, first=0):
    """The 32-bit draws ``[n, D]`` (uint64) of the elements of rows ``keys`` at ``steps``, columns from ``first``."""
    k = np.asarray(keys, np.int64).view(np.uint64)[:, None]
    col = np.arange(first, first + D, dtype=np.uint64)[None]
    s0, s1 = split64(seed)
    words = philox4x32_10(k & _MASK32, k >> _U32, _TAG | (col >> _U2), np.asarray(steps, np.uint64)[:, None], s0, s1)
    words = np.stack(np.broadcast_arrays(*words))
    return np.take_along_axis(words, (col & _U3).astype(np.intp)[None], axis=0)[0]


def stochastic_round_ref(x, keys, steps, seed, first=0):
    """The definition (NumPy): each element of ``x [n, D]`` (float32) goes to its float16 neighbour above ``|x|``
    with probability its distance from the one below over their gap, by its draw of ``random_words_ref``."""
    x = np.asarray(x, np.float32)
    a = np.abs(x).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # past 65504 and NaN: inf and NaN are what they give
        near = a.astype(np.float16)
        lo = np.where(near > a, np.nextafter(near, np.float16(0)), near)
        hi = np.where(near > a, near, np.nextafter(near, np.float16(np.inf)))
        gap = np.where(np.isinf(hi), 2.0 ** 16, hi.astype(np.float64)) - lo
        p = np.where(gap > 0, (a - lo) / gap, 0.0)
    u = random_words_ref(keys, steps, seed, x.shape[1], first) / 2.0 ** 32
    out = np.where(a >= 2.0 ** 16, np.float16(np.inf), np.where(u < p, hi, lo))
    return np.copysign(out, x).astype(np.float16)
