"""Philox4x32-10, the counter-based random generator of Salmon et al. (SC'11, Random123).

A counter-based generator has no state: the 128-bit output is a pure function of a 128-bit counter and a 64-bit
key. So a kernel can draw the random number of any element directly from that element's index, in any order, on
any device, and get the same stream. Dropout uses it so that a step's mask can be drawn again instead of stored,
and so that the CPU and the GPU make the same mask for the same (seed, step).

``philox4x32_10`` is written once, in plain Python on scalars, and compiled twice: ``philox4x32_10_cpu`` with
``numba.njit`` and ``philox4x32_10_device`` as a ``numba.cuda`` device function. Called on NumPy uint64 arrays it
also runs vectorized, which is what the NumPy references use.

The stream of this project: element ``i`` of a (seed, step) draw takes word ``i % 4`` of
``philox4x32_10(counter=(i // 4 low, high, step low, high), key=(seed low, high))``.
"""
import numba
import numpy as np
from numba import cuda

MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
# Random123's multipliers and Weyl key increments for Philox4x32.
M0 = np.uint64(0xD2511F53)
M1 = np.uint64(0xCD9E8D57)
W0 = np.uint64(0x9E3779B9)
W1 = np.uint64(0xBB67AE85)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """The four 32-bit output words for counter (c0..c3) and key (k0, k1), each given as a value below 2**32.

    Everything stays in uint64 and is masked to 32 bits: the 32x32-bit products need 64 bits, and uint64 keeps
    numba from promoting a signed/unsigned mix to float64.
    """
    c0, c1, c2, c3 = np.uint64(c0), np.uint64(c1), np.uint64(c2), np.uint64(c3)
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r > 0:
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = (((p1 >> SHIFT32) ^ c1 ^ k0), p1 & MASK32,
                          ((p0 >> SHIFT32) ^ c3 ^ k1), p0 & MASK32)
    return c0, c1, c2, c3


philox4x32_10_cpu = numba.njit(philox4x32_10, cache=True)
philox4x32_10_device = cuda.jit(device=True)(philox4x32_10)


def split64(v):
    """(low, high) 32-bit halves of a non-negative integer below 2**64, as NumPy uint64."""
    v = int(v)
    if not 0 <= v < 2 ** 64:
        raise ValueError(f"philox: {v} is not a 64-bit unsigned integer; seeds and steps must lie in [0, 2**64)")
    return np.uint64(v & 0xFFFFFFFF), np.uint64(v >> 32)


def random_bits_ref(seed, step, index):
    """The 32-bit draws (uint32) of the elements ``index`` (integer array) of the (seed, step) stream."""
    index = np.asarray(index, dtype=np.uint64)
    q = index >> np.uint64(2)
    s0, s1 = split64(seed)
    t0, t1 = split64(step)
    words = np.stack(np.broadcast_arrays(*philox4x32_10(q & MASK32, q >> SHIFT32, t0, t1, s0, s1)))
    lane = (index & np.uint64(3)).astype(np.intp)
    return np.take_along_axis(words, lane[None], axis=0)[0].astype(np.uint32)
