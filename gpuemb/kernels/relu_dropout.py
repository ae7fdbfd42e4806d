"""Fused ReLU + dropout that keeps its mask as bits: ``y = relu(x + bias) * keep / (1 - p)``.

The mask holds one bit per element, set where the element passed both the ReLU (x + bias > 0) and the dropout
draw, packed row-major into uint32 words: ``words_per_row`` words per row (at least ``ceil(cols / 32)``), bit
``j % 32`` of word ``j // 32`` for column ``j``, padding bits zero. It takes 1/32 of the memory of a float32
mask, and it is the layout of cuBLASLt's ReLU bitmask when ``words_per_row`` is a multiple of 4, so the fused MLP
hands it to the DRELU epilogue as it is.

The dropout draw of element ``(r, c)`` is the Philox stream of (seed, step) at the flat index
``(row0 + r) * cols + c`` (see philox.py), kept when it is at least ``p * 2**32``: every step can be drawn again,
the CPU and the GPU draw the same mask, and with ``row0`` the index of a rank's first row in the global batch, W
ranks draw the masks one process draws. With ``p = 0``, or outside training, no draw is made and the op is exactly
ReLU. With ``relu=False`` the sign test is skipped and the op is plain dropout.

- ``relu_dropout_ref`` / ``relu_dropout_backward_ref``: the definition, in NumPy;
- ``relu_dropout_cpu``: numba, parallel over chunks of rows: a row's Philox draws into a buffer, then each 32-bit
  word's values and bits in one loop; with no draw to make (p = 0, or eval), one fixed 32-lane loop a word;
- ``relu_dropout_cuda``: one thread per mask word, so each word is written once with no atomics. A warp-ballot
  kernel (one thread per element, ``ballot_sync`` per 32 columns) would coalesce the loads of x better; it is
  the next version to try where the benchmark shows this one off its bandwidth floor.
- the backward ``gx = gy * bit * scale``: numba over chunks of rows, which also sums gx's columns (the bias
  gradient of the layer below, ``relu_dropout_backward_sum``) in the same pass; one CUDA thread per element;
- ``relu_dropout`` / ``relu_dropout_backward`` / ``relu_dropout_backward_sum``: dispatchers; ``ReLUDropout``: the
  autograd Function.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module, is_device_array
from gpuemb.autograd.function import Function

from gpuemb.autograd.launch import kernel, over
from .philox import MASK32, SHIFT32, philox4x32_10_cpu, philox4x32_10_device, random_bits_ref, split64


def keep_threshold(p):
    """The draw below which an element is dropped: ``p * 2**32``, as a uint64."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p={p} must lie in [0, 1); p = 1 would drop everything and scale by 1/0")
    return np.uint64(int(p * 2 ** 32))


def dropout_scale(p, training):
    """What kept elements are multiplied by: ``1 / (1 - p)`` in training, 1 outside it."""
    return 1.0 / (1.0 - p) if training else 1.0


def mask_words(cols):
    """uint32 words per row of a bit mask over ``cols`` columns."""
    return (cols + 31) // 32


def pack_bits_ref(bits, words_per_row=None):
    """A bool ``[rows, cols]`` array packed into uint32 words, bit ``j % 32`` of word ``j // 32``."""
    rows, cols = bits.shape
    words = mask_words(cols) if words_per_row is None else words_per_row
    padded = np.zeros((rows, words * 32), dtype=bool)
    padded[:, :cols] = bits
    return np.packbits(padded, axis=1, bitorder="little").view("<u4").astype(np.uint32)


def unpack_bits_ref(mask, cols):
    """The bool ``[rows, cols]`` array that ``pack_bits_ref`` packed."""
    return np.unpackbits(mask.astype("<u4").view(np.uint8), axis=1, bitorder="little")[:, :cols].astype(bool)


def relu_dropout_ref(x, p, seed=0, step=0, training=True, relu=True, bias=None, words_per_row=None, row0=0):
    """``(y, mask)`` for a 2-D x: ``y = relu(x + bias) * keep / (1 - p)`` and its packed keep bits.

    row0: the index of x's first row in the whole batch (a rank's slice of it): rows draw by that index."""
    z = x if bias is None else x + bias
    rows, cols = z.shape
    keep = z > 0 if relu else np.ones(z.shape, dtype=bool)
    if keep_threshold(p if training else 0.0):
        draws = random_bits_ref(seed, step, np.arange(row0 * cols, (row0 + rows) * cols)).reshape(rows, cols)
        keep &= draws >= keep_threshold(p)
    scale = z.dtype.type(dropout_scale(p, training))
    y = np.where(keep, z * scale, z.dtype.type(0))
    return y, pack_bits_ref(keep, words_per_row)


def relu_dropout_backward_ref(gy, mask, scale):
    """``gx = gy * bit * scale`` for the mask that the forward returned."""
    bits = unpack_bits_ref(mask, gy.shape[1])
    return np.where(bits, gy * gy.dtype.type(scale), gy.dtype.type(0))


def _word_builder(philox):
    """The CUDA kernel's body, closed over the philox compiled for the device (the CPU kernel draws a row at once)."""

    def build_word(x, out, r, w, bias, s0, s1, t0, t1, thr, scale, row0, relu):
        # Writes row r, columns [32w, 32w + 32) of out and returns their keep bits. The Philox words of four
        # consecutive flat indices come from one call, so the last call is kept until the index leaves it.
        cols = x.shape[1]
        lo = 32 * w
        word = np.uint64(0)
        q_drawn = -1
        d0 = d1 = d2 = d3 = np.uint64(0)
        for c in range(lo, min(cols, lo + 32)):
            v = x[r, c] + bias[c]
            keep = v > 0 or not relu
            if thr:
                i = (row0 + r) * cols + c
                if i >> 2 != q_drawn:
                    q_drawn = i >> 2
                    q = np.uint64(q_drawn)
                    d0, d1, d2, d3 = philox(q & MASK32, q >> SHIFT32, t0, t1, s0, s1)
                lane = i & 3
                d = d0 if lane == 0 else d1 if lane == 1 else d2 if lane == 2 else d3
                keep = keep and d >= thr
            if keep:
                out[r, c] = v * scale
                word |= np.uint64(1) << np.uint64(c - lo)
            else:
                out[r, c] = 0
        return word

    return build_word


_build_word_device = cuda.jit(device=True)(_word_builder(philox4x32_10_device))


def _launch_args(x, p, seed, step, training, bias, out, words_per_row, row0=0):
    if x.ndim != 2:
        raise ValueError(f"relu_dropout: want a 2-D input, got shape {x.shape}")
    cols = x.shape[1]
    words = mask_words(cols) if words_per_row is None else int(words_per_row)
    if words < mask_words(cols):
        raise ValueError(f"relu_dropout: words_per_row={words} cannot hold {cols} columns; need {mask_words(cols)}")
    if bias is not None and bias.shape != (cols,):
        raise ValueError(f"relu_dropout: bias of shape {bias.shape} for {cols} columns")
    xp = get_array_module(x)
    bias = xp.zeros(cols, dtype=x.dtype) if bias is None else bias  # a numba.cuda launch takes no None argument
    out = xp.empty_like(x) if out is None else out
    mask = xp.empty((x.shape[0], words), dtype=np.uint32)
    s0, s1 = split64(seed)
    t0, t1 = split64(step)
    thr = keep_threshold(p if training else 0.0)
    scale = x.dtype.type(dropout_scale(p, training))
    return out, mask, (bias, s0, s1, t0, t1, thr, scale, np.int64(row0))


DRAW_ROWS = 16  # rows a CPU thread takes at a time, with one buffer of draws for them


@numba.njit(parallel=True, cache=True)
def _relu_dropout_cpu(x, out, mask, bias, s0, s1, t0, t1, thr, scale, row0, relu):
    # A row's draws first, four a Philox call, in a loop with no branch; then each word's values and bits in one
    # loop over its columns. 2.1 to 2.4x faster than building each word element by element with the draw picked
    # by lane (2048 x 1024: 4.8 against 10.2 ms on 2 cores), and the same bits.
    rows, cols = x.shape
    zero = x.dtype.type(0)
    for chunk in numba.prange(-(-rows // DRAW_ROWS)):
        draws = np.empty(4 * (cols // 4 + 2), dtype=np.uint64)
        for r in range(chunk * DRAW_ROWS, min(rows, (chunk + 1) * DRAW_ROWS)):
            base = (row0 + r) * cols  # the flat index of (r, 0) in the whole batch
            q_lo = base >> 2
            for k in range(((base + cols - 1) >> 2) - q_lo + 1):
                q = np.uint64(q_lo + k)
                d0, d1, d2, d3 = philox4x32_10_cpu(q & MASK32, q >> SHIFT32, t0, t1, s0, s1)
                draws[4 * k], draws[4 * k + 1], draws[4 * k + 2], draws[4 * k + 3] = d0, d1, d2, d3
            at = base - 4 * q_lo  # draws[at + c] is column c's
            words = (cols + 31) >> 5
            for w in range(words):
                word = np.uint32(0)
                for j in range(min(32, cols - (w << 5))):
                    c = (w << 5) + j
                    v = x[r, c] + bias[c]
                    keep = (v > zero or not relu) and draws[at + c] >= thr
                    out[r, c] = v * scale if keep else zero
                    word |= np.uint32(keep) << np.uint32(j)
                mask[r, w] = word
            for w in range(words, mask.shape[1]):  # padding words (cuBLASLt's layout)
                mask[r, w] = 0


@numba.njit(parallel=True, cache=True)
def _relu_bias_cpu(x, out, mask, bias, scale):
    # No draw to make: each whole word is a fixed 32-lane loop that writes the values and sets the bits together,
    # which vectorises; 3x faster at 512 columns (0.13 against 0.43 ms for 2048 rows on 2 cores) than a pass for
    # the values and a loop of bounds that depend on the row for the bits. out may be x itself.
    cols = x.shape[1]
    zero = x.dtype.type(0)
    for r in numba.prange(x.shape[0]):
        for w in range(cols >> 5):
            word = np.uint32(0)
            for j in range(32):
                c = (w << 5) + j
                v = x[r, c] + bias[c]
                keep = v > zero
                out[r, c] = v * scale if keep else zero
                word |= np.uint32(keep) << np.uint32(j)
            mask[r, w] = word
        words = cols >> 5
        if cols & 31:  # the last, partial word
            word = np.uint32(0)
            for c in range(cols & ~31, cols):
                v = x[r, c] + bias[c]
                keep = v > zero
                out[r, c] = v * scale if keep else zero
                word |= np.uint32(keep) << np.uint32(c & 31)
            mask[r, words] = word
            words += 1
        for w in range(words, mask.shape[1]):  # padding words (cuBLASLt's layout)
            mask[r, w] = 0


def relu_dropout_cpu(x, p, seed=0, step=0, training=True, relu=True, bias=None, out=None, words_per_row=None,
                     row0=0):
    out, mask, args = _launch_args(x, p, seed, step, training, bias, out, words_per_row, row0)
    bias, thr, scale = args[0], args[5], args[6]
    if relu and not thr:  # ReLU alone, the MLPs' usual case: 5x faster than building words element by element
        _relu_bias_cpu(x, out, mask, bias, scale)
    else:
        _relu_dropout_cpu(x, out, mask, *args, relu)
    return out, mask


@kernel(cache=False)
def _relu_dropout_kernel(x, out, mask, bias, s0, s1, t0, t1, thr, scale, row0, relu):
    words = mask.shape[1]
    for k in range(cuda.grid(1), x.shape[0] * words, cuda.gridsize(1)):
        r = k // words
        w = k - r * words
        mask[r, w] = _build_word_device(x, out, r, w, bias, s0, s1, t0, t1, thr, scale, row0, relu)


def relu_dropout_cuda(x, p, seed=0, step=0, training=True, relu=True, bias=None, out=None, words_per_row=None,
                      row0=0):
    out, mask, args = _launch_args(x, p, seed, step, training, bias, out, words_per_row, row0)
    n = mask.size
    _relu_dropout_kernel[over(n, x)](x, out, mask, *args, relu)
    return out, mask


def relu_dropout(x, p, seed=0, step=0, training=True, relu=True, bias=None, out=None, words_per_row=None, row0=0):
    """``(y, mask)``, ``y = relu(x + bias) * keep / (1 - p)`` for a 2-D x: CUDA for CuPy arrays, numba for NumPy.

    seed, step: the Philox key and the step counter of the draw. out: where to write y (may be x itself).
    words_per_row: the mask's row stride in uint32 words; at least ceil(cols / 32). row0: the index of x's first
    row in the whole batch; a row draws by that index, so ranks that each hold a slice draw one process's masks.
    """
    run = relu_dropout_cuda if is_device_array(x) else relu_dropout_cpu
    return run(x, p, seed, step, training, relu, bias, out, words_per_row, row0)


# Rows that one chunk of the CPU backward sums in order into its own row of partial column sums: a split fixed by
# the batch, so the bias gradient's rounding does not depend on the thread count, and small enough that a batch of
# a few hundred rows still gives every core chunks.
SUM_ROWS = 64


@numba.njit(parallel=True, cache=True)
def _relu_dropout_backward_cpu(gy, mask, scale, gx, sums):
    # gx may be gy itself. sums[k] (zeros) gets the column sums of gx's rows [k * SUM_ROWS, (k + 1) * SUM_ROWS): the
    # layer's bias gradient, summed while each value is in a register instead of in a second pass over gx.
    rows, cols = gy.shape
    zero = gy.dtype.type(0)
    for k in numba.prange(sums.shape[0]):
        acc = sums[k]
        for r in range(k * SUM_ROWS, min(rows, (k + 1) * SUM_ROWS)):
            for w in range(cols >> 5):  # whole words: a fixed 32-lane loop of shifts and selects, which vectorises
                word = mask[r, w]
                for j in range(32):
                    c = (w << 5) + j
                    v = gy[r, c] * scale if (word >> np.uint32(j)) & np.uint32(1) else zero
                    gx[r, c] = v
                    acc[c] += v
            for c in range(cols & ~31, cols):
                v = gy[r, c] * scale if (mask[r, c >> 5] >> (c & 31)) & 1 else zero
                gx[r, c] = v
                acc[c] += v


@kernel
def _relu_dropout_backward_kernel(gy, mask, scale, gx):
    cols = gy.shape[1]
    for k in range(cuda.grid(1), gy.shape[0] * cols, cuda.gridsize(1)):
        r = k // cols
        c = k - r * cols
        if (mask[r, c >> 5] >> (c & 31)) & 1:
            gx[r, c] = gy[r, c] * scale
        else:
            gx[r, c] = 0


def _backward_args(gy, mask, scale, out):
    if mask.shape[0] != gy.shape[0] or mask.shape[1] < mask_words(gy.shape[1]):
        raise ValueError(f"relu_dropout_backward: mask of shape {mask.shape} for a gradient of shape {gy.shape}")
    return get_array_module(gy).empty_like(gy) if out is None else out, gy.dtype.type(scale)


def relu_dropout_backward_sum_ref(gy, mask, scale, out=None):
    """``(gx, gx.sum(axis=0))``: the backward and the bias gradient of the layer whose output went through it."""
    gx = relu_dropout_backward_ref(gy, mask, scale)
    return gx, gx.sum(axis=0)


def relu_dropout_backward_sum_cpu(gy, mask, scale, out=None):
    gx, scale = _backward_args(gy, mask, scale, out)
    sums = np.zeros((-(-gy.shape[0] // SUM_ROWS), gy.shape[1]), gy.dtype)
    _relu_dropout_backward_cpu(gy, mask, scale, gx, sums)
    return gx, sums.sum(axis=0)


def relu_dropout_backward_cpu(gy, mask, scale, out=None):
    return relu_dropout_backward_sum_cpu(gy, mask, scale, out)[0]  # the sums cost a register add per element


def relu_dropout_backward_cuda(gy, mask, scale, out=None):
    gx, scale = _backward_args(gy, mask, scale, out)
    _relu_dropout_backward_kernel[over(gy.size, gy)](gy, mask, scale, gx)
    return gx


def relu_dropout_backward_sum_cuda(gy, mask, scale, out=None):
    gx = relu_dropout_backward_cuda(gy, mask, scale, out)
    return gx, gx.sum(axis=0)


def relu_dropout_backward(gy, mask, scale, out=None):
    """``gx = gy * bit * scale``: the gradient through ``relu_dropout`` given its mask; out may be gy itself."""
    run = relu_dropout_backward_cuda if is_device_array(gy) else relu_dropout_backward_cpu
    return run(gy, mask, scale, out)


def relu_dropout_backward_sum(gy, mask, scale, out=None):
    """``(gx, gx.sum(axis=0))``; on the CPU the sum is taken in the same pass."""
    run = relu_dropout_backward_sum_cuda if is_device_array(gy) else relu_dropout_backward_sum_cpu
    return run(gy, mask, scale, out)


class ReLUDropout(Function):
    """``relu(x) * keep / (1 - p)`` with the mask kept as bits for the backward.

    seed, step: the Philox key and step of the draw; the caller advances step once per training step. row0: the
    index of x's first row in the whole batch.
    """

    def __init__(self, p, seed=0, step=0, training=True, relu=True, row0=0):
        self.p, self.seed, self.step, self.training, self.relu, self.row0 = p, seed, step, training, relu, row0

    def forward(self, x):
        y, self.mask = relu_dropout(x, self.p, self.seed, self.step, self.training, self.relu, row0=self.row0)
        return y

    def backward(self, gy):
        return relu_dropout_backward(gy, self.mask, dropout_scale(self.p, self.training))
