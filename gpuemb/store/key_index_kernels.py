"""The kernels of the key index (``key_index.py``): linear probing over a power-of-two table of int64 keys.

Layout: ``entries [cap + 2, 2]`` int64, a row per entry, ``(key, value)``, so a probe reads one cache line (one
32-byte sector on the GPU) for both. ``EMPTY`` and ``TOMB`` are the int64 minimum and minimum + 1; a real key equal
to one of them never enters the table and owns row ``cap`` or ``cap + 1`` instead, so every key has a position.

A value says what state an entry is in: ``>= 0`` a slot, ``-1`` no entry (empty side rows, erased entries), ``-2``
claimed but no slot assigned yet, ``<= -3`` a claim marker that lives only during one claim.

A key only ever goes EMPTY -> key (claim) or key -> TOMB (erase), and tombstones are reused only by a rehash.
So a claim needs one atomicCAS on an EMPTY key and nothing else: a read that sees the key is final, a read that
sees EMPTY is checked by the CAS. Which occurrence of a key in a batch is "new" is decided by the lowest batch
index (``atomic.min`` of a marker), so the CPU and GPU agree and slots follow the batch order on both.

- ``*_cpu``: numba; lookups parallel, claims sequential (a claim writes the table);
- ``*_cuda``: numba.cuda, one thread per key.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.launch import blocks_for, stream_for

EMPTY = np.int64(-(1 << 63))
TOMB = np.int64(-(1 << 63) + 1)
NO_SLOT = -1
CLAIMED = -2


def _mix(k):
    """splitmix64's finalizer: every input bit moves every output bit, so sequential IDs spread over the table."""
    k = np.uint64(k)
    k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return k ^ (k >> np.uint64(31))


def _finder(mix, jit):
    """``find(entries, k)`` compiled by ``jit`` around the hash ``mix``: one probe loop for both devices."""
    def find(entries, k):
        """The row of key ``k``, ``cap`` + 0/1 for the two sentinel keys, or -1 where absent."""
        cap = entries.shape[0] - 2
        if k == EMPTY or k == TOMB:
            return cap + (k - EMPTY)
        mask = cap - 1
        p = np.int64(mix(k) & np.uint64(mask))
        while True:
            cur = entries[p, 0]
            if cur == k:
                return p
            if cur == EMPTY:
                return -1
            p = (p + 1) & mask
    return jit(find)


_mix_cpu = numba.njit(inline="always")(_mix)
_find_cpu = _finder(_mix_cpu, numba.njit(inline="always"))


@numba.njit(parallel=True, cache=True)
def lookup_cpu(entries, keys, want_slots, out):
    """``out[i]``: the slot of ``keys[i]`` (``want_slots``) or its row; -1 where absent or slot-less."""
    for i in numba.prange(keys.shape[0]):
        p = _find_cpu(entries, keys[i])
        if p >= 0 and want_slots:
            p = max(entries[p, 1], NO_SLOT)
        elif p >= 0 and entries[p, 1] == NO_SLOT:
            p = -1  # a sentinel key's side row that holds no entry
        out[i] = p


@numba.njit(cache=True)
def claim_cpu(entries, keys, pos, is_new):
    """Find or claim a row per key into ``pos``; ``is_new`` on the first occurrence of each slot-less entry.

    Returns the number of keys claimed (EMPTY -> key).
    """
    cap = entries.shape[0] - 2
    mask = cap - 1
    fresh = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if k == EMPTY or k == TOMB:
            p = cap + (k - EMPTY)
        else:
            p = np.int64(_mix_cpu(k) & np.uint64(mask))
            while entries[p, 0] != k:
                if entries[p, 0] == EMPTY:
                    entries[p, 0] = k
                    fresh += 1
                    break
                p = (p + 1) & mask
        pos[i] = p
        v = entries[p, 1]
        is_new[i] = v == NO_SLOT or v == CLAIMED
        if is_new[i]:
            entries[p, 1] = CLAIMED - 1  # taken in this batch: later occurrences are not new
    for i in range(keys.shape[0]):
        if is_new[i]:
            entries[pos[i], 1] = CLAIMED
    return fresh


# -- CUDA ---------------------------------------------------------------------------------------------------------
_mix_cuda = cuda.jit(device=True)(_mix)
_find_cuda = _finder(_mix_cuda, cuda.jit(device=True))


@cuda.jit(cache=True)
def _lookup_kernel(entries, keys, want_slots, out):
    i = cuda.grid(1)
    if i < keys.shape[0]:
        p = _find_cuda(entries, keys[i])
        if p >= 0 and want_slots:
            p = max(entries[p, 1], NO_SLOT)
        elif p >= 0 and entries[p, 1] == NO_SLOT:
            p = -1
        out[i] = p


@cuda.jit(cache=True)
def _claim_kernel(entries, keys, pos, fresh):
    i = cuda.grid(1)
    n = keys.shape[0]
    if i < n:
        k = keys[i]
        cap = entries.shape[0] - 2
        if k == EMPTY or k == TOMB:
            p = cap + (k - EMPTY)
        else:
            mask = cap - 1
            p = np.int64(_mix_cuda(k) & np.uint64(mask))
            while True:
                cur = entries[p, 0]
                if cur == EMPTY:
                    cur = cuda.atomic.cas(entries, (p, 0), EMPTY, k)
                    if cur == EMPTY:
                        cuda.atomic.add(fresh, 0, 1)
                        break
                if cur == k:
                    break
                p = (p + 1) & mask
        pos[i] = p
        # Values >= 0 are never written here, so this read cannot race; the lowest index's marker wins.
        if entries[p, 1] < 0:
            cuda.atomic.min(entries, (p, 1), i - n - 2)


@cuda.jit(cache=True)
def _mark_new_kernel(entries, pos, is_new):
    i = cuda.grid(1)
    n = pos.shape[0]
    if i < n:
        p = pos[i]
        # The winner's reset to CLAIMED cannot fool a loser: no marker equals CLAIMED.
        is_new[i] = entries[p, 1] == i - n - 2
        if is_new[i]:
            entries[p, 1] = CLAIMED


def lookup_cuda(entries, keys, want_slots, out):
    _lookup_kernel[blocks_for(keys.shape[0]), 256, stream_for(keys)](entries, keys, want_slots, out)


def claim_cuda(entries, keys, pos, is_new):
    """The CUDA twin of ``claim_cpu``: claim then mark, two launches because marking needs every claim done."""
    fresh = get_array_module(keys).zeros(1, dtype=np.int64)
    blocks, stream = blocks_for(keys.shape[0]), stream_for(keys)
    _claim_kernel[blocks, 256, stream](entries, keys, pos, fresh)
    _mark_new_kernel[blocks, 256, stream](entries, pos, is_new)
    return int(fresh[0])
