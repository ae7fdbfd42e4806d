"""How a table's rows are stored: the row ``[weights | optimizer state]`` as the tiers hold it.

The row update and the lookup compute on *working rows*: ``[n, row_width]`` of one float dtype, laid out by
``optim.row_layout`` (float32 tables and float64 ones keep every column in that dtype, and store the working row
as it is). A float16 table stores its weights in float16, halving them in every tier (device, host, ssd file,
snapshot), while its optimizer state stays float32: an Adagrad accumulator or Adam's second moment spans far more
than float16's range, and its small increments would vanish in 11 bits of mantissa.

A stored float16 row is one float16 array: the D weights, then each float32 state column as the two 16-bit
halves of its bits, so a state part that is ``k`` float32 columns wide takes ``2k`` stored columns::

    working (float32)  [ w_0 ... w_{D-1} | s_0 | s_1 ... ]
    stored  (float16)  [ w_0 ... w_{D-1} | s_0 lo, s_0 hi | s_1 lo, s_1 hi ... ]

The weights columns are plain float16 that any tool reads as they are; a state part reads back with
``rows[:, a:b].view("<f4")`` (the snapshot records each part's dtype). The state's halves are bit patterns, not
float16 values, so they only ever move as 16-bit integers, never through float16 arithmetic.

Rounding float32 -> float16 is round-to-nearest-even (NumPy's and CuPy's ``astype``) unless the format's
``rounding`` is ``"stochastic"`` (``rounding.py``). Round-to-nearest loses every update below half a float16 ulp
(a weight near 1 has an ulp of 2**-10, so an update under ~5e-4 is lost every time); stochastic rounding keeps the
expected weight unbiased, so such updates add up. Both are deterministic: stochastic rounding draws its bits from
(seed, key, the row's update count, column) with a counter-based generator, so a row's value depends only on its
inputs, a tiered table still trains bit for bit like a device one, a resumed run equals an unbroken one, and tests
compare against a NumPy reference exactly. Fresh rows and rows whose weights did not change round to nearest (an
initial draw has no bias to keep, and an unchanged weight is a float16 already). With Adagrad-style rules, whose
steps are ``lr·g/sqrt(acc)`` and large, round-to-nearest did not stall (docs/store.md, "float16 rows").
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module
from gpuemb.optim import init_rows, row_layout

from .rounding import stochastic_round

STATE_DTYPE = np.dtype("<f4")  # the optimizer state of a float16 table


class RowFormat:
    """The stored form of a table's rows for ``rule``, width ``dim`` and weights ``dtype``.

    ``width``/``dtype``: what a tier holds per row. ``layout``: the stored columns of each part, and
    ``part_dtypes`` the dtype each part reads as. ``compute_dtype``: the dtype of working rows and of lookups.
    ``rounding`` (``rounding.ROUNDINGS``) and ``seed``: how updated float16 weights are rounded; ``first``: the
    whole row's column of the first weight (a column shard's start), which stochastic rounding draws by.
    """

    def __init__(self, rule, dim, dtype="float32", rounding="nearest", seed=0, first=0):
        self.rule, self.dim, self.dtype = rule, dim, np.dtype(dtype)
        self.rounding, self.seed, self.first = rounding, seed, first
        self.packed = self.dtype.itemsize < STATE_DTYPE.itemsize
        self.compute_dtype = STATE_DTYPE if self.packed else self.dtype
        self.working_layout = row_layout(rule, dim)
        self.working_width = list(self.working_layout.values())[-1].stop
        per = STATE_DTYPE.itemsize // self.dtype.itemsize if self.packed else 1  # stored columns per state column
        self.layout, start = {}, 0
        for name, s in self.working_layout.items():
            n = (s.stop - s.start) * (1 if name == "weights" else per)
            self.layout[name], start = slice(start, start + n), start + n
        self.width = start
        state = STATE_DTYPE if self.packed else self.dtype
        self.part_dtypes = {name: str(self.dtype if name == "weights" else state) for name in self.layout}

    @property
    def row_bytes(self):
        return self.width * self.dtype.itemsize

    @property
    def weight_bytes(self):
        """Bytes of one row's weights as stored."""
        return self.dim * self.dtype.itemsize

    def new_rows(self, weights):
        """Stored rows of fresh keys from their initial weights ``[n, dim]`` (any float dtype)."""
        return self.pack(init_rows(self.rule, weights.astype(self.compute_dtype, copy=False)))

    @property
    def stochastic(self):
        """Whether updated weights round stochastically, and so ``pack`` wants their keys and steps."""
        return self.packed and self.rounding == "stochastic"

    def pack(self, rows, keys=None, steps=None):
        """Stored rows ``[n, width]`` from working rows ``[n, row_width]`` (the same array when not packed).

        keys, steps: the rows' keys (int64, the table's own) and update counts after this update, with which a
        stochastic format rounds the weights; without them, or in a nearest one, they round to nearest even."""
        if not self.packed:
            return rows
        xp, D = get_array_module(rows), self.dim
        out = xp.empty((rows.shape[0], self.width), self.dtype)
        if self.stochastic and keys is not None:
            stochastic_round(rows[:, :D], keys, steps, self.seed, out[:, :D], self.first)
        else:
            out[:, :D] = rows[:, :D]  # float32 -> float16, round to nearest even
        state = xp.ascontiguousarray(rows[:, D:], dtype=STATE_DTYPE)
        out.view(np.uint16)[:, D:] = state.view(np.uint16)
        return out

    def unpack(self, stored):
        """Working rows ``[n, row_width]`` in ``compute_dtype`` from stored ones (the same array when not packed)."""
        if not self.packed:
            return stored
        xp, D = get_array_module(stored), self.dim
        out = xp.empty((stored.shape[0], self.working_width), STATE_DTYPE)
        out[:, :D] = stored[:, :D]
        out[:, D:] = xp.ascontiguousarray(stored.view(np.uint16)[:, D:]).view(STATE_DTYPE)
        return out

    def weights(self, stored):
        """The weights ``[n, dim]`` of stored rows, contiguous, in ``compute_dtype``."""
        xp = get_array_module(stored)
        return xp.ascontiguousarray(stored[:, :self.dim], dtype=self.compute_dtype)
