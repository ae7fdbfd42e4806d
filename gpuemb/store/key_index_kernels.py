"""The kernels of the key index (``key_index.py``): linear probing over a table of any capacity below 2**32.

Layout: two arrays of ``cap + 2`` rows, ``keys`` int64 and ``slots`` int32 (12 bytes a row). ``EMPTY`` and ``TOMB``
are the int64 minimum and minimum + 1; a real key equal to one of them never enters the table and owns row
``cap`` or ``cap + 1`` instead (whose keys hold those very values), so every key has a row.

A key's home row is "fastrange" of its hash: the hash's top 32 bits times ``cap``, over 2**32. That needs no
power-of-two capacity (so the table can grow by less than 2x) and is monotone in the hash, so a table is nearly
sorted by hash and a rehash that walks the old table in order writes the new one nearly in order too.

A slot says what state a row is in: ``>= 0`` a slot, ``-1`` no entry (empty side rows, erased entries), ``-2``
claimed but no slot assigned yet, ``<= -3`` a claim marker that lives only during one claim.

A key only ever goes EMPTY -> key (claim) or key -> TOMB (erase), and tombstones are reused only by a rehash.
So a claim needs one atomicCAS on an EMPTY key and nothing else: a read that sees the key is final, a read that
sees EMPTY is checked by the CAS. Slots are written after the claim. Which occurrence of a key in a batch is
"new" is decided by the lowest batch index (``atomic.min`` of a marker on the int32 slot), so the CPU and GPU
agree and slots follow the batch order on both.

- ``CPU``: numba; lookups parallel, claims and rehashes sequential (they write the table);
- ``CUDA``: numba.cuda, one thread per key (per old row in a rehash).
"""
from typing import Callable, NamedTuple

import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.launch import kernel, over
from gpuemb.io.hashing import splitmix64_finalizer

EMPTY = np.int64(-(1 << 63))
TOMB = np.int64(-(1 << 63) + 1)
NO_SLOT = -1
CLAIMED = -2
MAX_CAPACITY = (1 << 32) - 1  # fastrange's product (hash >> 32) * cap must fit in 64 bits


def _probes(mix, jit):
    """``(home, locate)`` compiled by ``jit`` around the hash ``mix`` (splitmix64's finalizer, so sequential IDs
    spread over the table): one probe loop for both devices."""
    def home(k, cap):
        """fastrange: the hash's top 32 bits scaled to ``[0, cap)``."""
        return np.int64(((mix(np.uint64(k)) >> np.uint64(32)) * np.uint64(cap)) >> np.uint64(32))

    home = jit(home)

    def locate(keys, k):
        """The row of key ``k``, or the EMPTY row where it would go; ``cap`` + 0/1 for the two sentinel keys."""
        cap = keys.shape[0] - 2
        if k == EMPTY or k == TOMB:
            return cap + (k - EMPTY)
        p = home(k, cap)
        while keys[p] != k and keys[p] != EMPTY:
            p += 1
            if p == cap:
                p = 0
        return p

    return home, jit(locate)


def _row_of(locate, jit):
    """``row(keys, slots, k)`` compiled by ``jit``: the row of ``k``, -1 where absent (a sentinel key's side row
    without an entry included)."""
    def row(keys, slots, k):
        p = locate(keys, k)
        cap = keys.shape[0] - 2
        return p if keys[p] == k and (p < cap or slots[p] != NO_SLOT) else np.int64(-1)
    return jit(row)


class Kernels(NamedTuple):
    """One device's kernels, all on the table's ``(keys, slots)`` arrays."""
    lookup: Callable  # (keys, slots, batch, want_slots, out)
    claim: Callable   # (keys, slots, batch, pos, is_new) -> rows claimed EMPTY -> key (a number, or [1] on the device)
    rehash: Callable  # (old_keys, old_slots, keys, slots): every live table row into an empty table
    assign: Callable  # (slots, pos, values, where): slots[pos[i]] = values[i] where where[i]


# -- CPU ----------------------------------------------------------------------------------------------------------
_, _locate_cpu = _probes(numba.njit(inline="always")(splitmix64_finalizer), numba.njit(inline="always"))
_row_cpu = _row_of(_locate_cpu, numba.njit(inline="always"))


@numba.njit(parallel=True, cache=True)
def lookup_cpu(keys, slots, batch, want_slots, out):
    """``out[i]``: the slot of ``batch[i]`` (``want_slots``) or its row; -1 where absent or slot-less."""
    for i in numba.prange(batch.shape[0]):
        out[i] = _row_cpu(keys, slots, batch[i])
    if want_slots:  # a second pass: a plain gather keeps many cache misses in flight (+15% at 1e7 keys)
        for i in numba.prange(batch.shape[0]):
            if out[i] >= 0:
                out[i] = max(slots[out[i]], NO_SLOT)


@numba.njit(cache=True)
def claim_cpu(keys, slots, batch, pos, is_new):
    """Find or claim a row per key into ``pos``; ``is_new`` on the first occurrence of each slot-less entry."""
    fresh = 0
    for i in range(batch.shape[0]):
        k = batch[i]
        p = _locate_cpu(keys, k)
        if keys[p] != k:
            keys[p] = k
            fresh += 1
        pos[i] = p
        v = slots[p]
        is_new[i] = v == NO_SLOT or v == CLAIMED
        if is_new[i]:
            slots[p] = CLAIMED - 1  # taken in this batch: later occurrences are not new
    for i in range(batch.shape[0]):
        if is_new[i]:
            slots[pos[i]] = CLAIMED
    return fresh


@numba.njit(cache=True)
def rehash_cpu(old_keys, old_slots, keys, slots):
    for q in range(old_keys.shape[0] - 2):  # in table order, so nearly in the new table's order (fastrange)
        k = old_keys[q]
        if k != EMPTY and k != TOMB:
            p = _locate_cpu(keys, k)
            keys[p] = k
            slots[p] = old_slots[q]


def assign_cpu(slots, pos, values, where):
    slots[pos[where]] = values[where]


CPU = Kernels(lookup_cpu, claim_cpu, rehash_cpu, assign_cpu)


# -- CUDA ---------------------------------------------------------------------------------------------------------
_home_cuda, _locate_cuda = _probes(cuda.jit(device=True)(splitmix64_finalizer), cuda.jit(device=True))
_row_cuda = _row_of(_locate_cuda, cuda.jit(device=True))


@cuda.jit(device=True)
def _claim_row_cuda(keys, k):
    """``(row, claimed_here)``: the row of ``k``, claimed with one atomicCAS where absent."""
    cap = keys.shape[0] - 2
    if k == EMPTY or k == TOMB:
        return cap + (k - EMPTY), False
    p = _home_cuda(k, cap)
    while True:
        cur = keys[p]
        if cur == EMPTY:
            cur = cuda.atomic.cas(keys, p, EMPTY, k)
            if cur == EMPTY:
                return p, True
        if cur == k:
            return p, False
        p += 1
        if p == cap:
            p = 0


@kernel
def _lookup_kernel(keys, slots, batch, want_slots, out):
    for i in range(cuda.grid(1), batch.shape[0], cuda.gridsize(1)):
        p = _row_cuda(keys, slots, batch[i])
        out[i] = max(slots[p], NO_SLOT) if p >= 0 and want_slots else p


@kernel
def _claim_kernel(keys, slots, batch, pos, fresh):
    n = batch.shape[0]
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        p, claimed = _claim_row_cuda(keys, batch[i])
        if claimed:
            cuda.atomic.add(fresh, 0, 1)
        pos[i] = p
        # Slots >= 0 are never written here, so this read cannot race; the lowest index's marker wins.
        if slots[p] < 0:
            cuda.atomic.min(slots, p, np.int32(i - n - 2))


@kernel
def _mark_new_kernel(slots, pos, is_new):
    n = pos.shape[0]
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        p = pos[i]
        # The winner's reset to CLAIMED cannot fool a loser: no marker equals CLAIMED.
        is_new[i] = slots[p] == i - n - 2
        if is_new[i]:
            slots[p] = CLAIMED


@kernel
def _rehash_kernel(old_keys, old_slots, keys, slots):
    for q in range(cuda.grid(1), old_keys.shape[0] - 2, cuda.gridsize(1)):
        k = old_keys[q]
        if k != EMPTY and k != TOMB:
            p, _ = _claim_row_cuda(keys, k)  # the keys are distinct, so every claim wins
            slots[p] = old_slots[q]


@kernel
def _assign_kernel(slots, pos, values, where):
    for i in range(cuda.grid(1), pos.shape[0], cuda.gridsize(1)):
        if where[i]:
            slots[pos[i]] = values[i]


def lookup_cuda(keys, slots, batch, want_slots, out):
    _lookup_kernel[over(batch.shape[0], batch)](keys, slots, batch, want_slots, out)


def claim_cuda(keys, slots, batch, pos, is_new):
    """The CUDA twin of ``claim_cpu``: claim then mark, two launches because marking needs every claim done."""
    fresh = get_array_module(batch).zeros(1, dtype=np.int64)
    launch = over(batch.shape[0], batch)
    _claim_kernel[launch](keys, slots, batch, pos, fresh)
    _mark_new_kernel[launch](slots, pos, is_new)
    return fresh  # left on the device: the index adds it to its count there, unread


def rehash_cuda(old_keys, old_slots, keys, slots):
    _rehash_kernel[over(old_keys.shape[0] - 2, keys)](old_keys, old_slots, keys, slots)


def assign_cuda(slots, pos, values, where):
    """A masked scatter in one launch: the unset positions may repeat a set one (a fixed-size unique's padding)."""
    _assign_kernel[over(pos.shape[0], pos)](slots, pos, values, where)


CUDA = Kernels(lookup_cuda, claim_cuda, rehash_cuda, assign_cuda)
