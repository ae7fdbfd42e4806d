"""The slab allocator: fixed-size row slots of one tier, handed out as int64 row ids (docs/design.md, "The
embedding store").

Rows ``[0, capacity)`` belong to the tier's slabs of ``slab_rows`` rows each. Rows below the bump pointer have
been handed out at least once; a freed row goes on a stack and is reused first (last freed, first reused). So
``alloc`` and ``free`` are O(1) per row, batched in NumPy, and the same call sequence gives the same ids.
The allocator's own memory is a used flag per row handed out so far (for catching double frees), grown by a
quarter at a time so it stays under 1.25 bytes a row, plus eight bytes per row waiting on the free stack. The
flags follow the bump pointer, not the capacity, so a small table does not pay for a whole slab of them.
"""
from dataclasses import dataclass

import numba
import numpy as np

from gpuemb.autograd.backend import get_array_module, unique

from .errors import RowStateError, StoreFullError


@dataclass(frozen=True)
class SlabStats:
    """A snapshot of an allocator: rows, slabs, and bytes.

    ``fragmentation`` is the share of capacity that was freed and not yet reused (rows on the free stack over
    capacity): holes inside the handed-out range, which cost storage but are the first rows ``alloc`` reuses.
    """
    capacity: int
    used: int
    free: int
    slabs: int
    fragmentation: float
    storage_bytes: int
    overhead_bytes: int


@numba.njit(cache=True)
def _release(used, ids):
    """Clear ``used[ids]``; at the first id that is not in use, restore the ones cleared and return its position."""
    for i in range(ids.shape[0]):
        r = ids[i]
        if r < 0 or r >= used.shape[0] or not used[r]:
            for j in range(i):
                used[ids[j]] = True
            return i
        used[r] = False
    return -1


def grown_to(a, size, ahead=4):
    """``a`` zero-extended to at least ``size`` elements: ``a`` itself while it is long enough, else a copy larger
    by ``1/ahead`` at least, for arrays that follow a growing number of rows (the used flags here, a level's per-slot
    arrays, a tier's rows). Growing to exactly the size at every slab would copy them whole each time, quadratic in
    the rows (1,500 copies of up to 100M slots for a 100M-row table in 64k-row slabs); a quarter keeps growth
    amortised O(1) and the slack under a quarter, which counts against the store's bytes per key. The slots past the
    old length are zero, which every reader takes as unoccupied."""
    if a.shape[0] >= size:
        return a
    b = get_array_module(a).zeros((max(size, a.shape[0] + a.shape[0] // ahead),) + a.shape[1:], a.dtype)
    b[:a.shape[0]] = a
    return b


class SlabAllocator:
    """Row slots of ``tier``, grown one ``tier.add_slab()`` at a time up to ``max_rows`` (None: no bound)."""

    def __init__(self, tier, max_rows=None):
        slab_rows = int(tier.slab_rows)
        if max_rows is not None and (max_rows < slab_rows or max_rows % slab_rows):
            raise ValueError(f"SlabAllocator: max_rows={max_rows} must be a positive multiple of the tier's "
                             f"slab_rows={slab_rows}; use {max(1, max_rows // slab_rows) * slab_rows}")
        self.tier, self.slab_rows, self.max_rows = tier, slab_rows, max_rows
        self._used = np.zeros(0, np.bool_)
        self._stack = np.empty(0, np.int64)
        self._top = 0  # rows on the free stack: stack[:top]
        self._bump = 0   # rows [0, bump) were handed out at least once

    @property
    def capacity(self):
        return self.tier.capacity

    @property
    def n_used(self):
        return self._bump - self._top

    @property
    def n_free(self):
        return self.capacity - self.n_used

    def alloc(self, n):
        """``n`` row ids (int64); grows the tier a slab at a time, or raises StoreFullError having done nothing."""
        n = int(n)
        if n < 0:
            raise ValueError(f"alloc: asked for {n} rows; ask for zero or more")
        k = min(n, self._top)
        fresh = n - k
        if self.max_rows is not None and self._bump + fresh > self.max_rows:
            raise StoreFullError(
                f"alloc({n}): only {self.max_rows - self.n_used} rows are free under the bound max_rows="
                f"{self.max_rows} ({self.n_used} in use, {self.capacity} allocated in slabs of {self.slab_rows}); "
                "raise max_rows, free rows first, or let the table evict")
        while self._bump + fresh > self.capacity:
            self.tier.add_slab()
        self._used = grown_to(self._used, self._bump + fresh)
        ids = np.empty(n, np.int64)
        ids[:k] = self._stack[self._top - k:self._top][::-1]
        ids[k:] = np.arange(self._bump, self._bump + fresh, dtype=np.int64)
        self._top -= k
        self._bump += fresh
        self._used[ids] = True
        return ids

    def free(self, ids):
        """Return rows to the free stack; a row not in use (double free, never allocated) raises and frees nothing."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        bad = _release(self._used, ids)
        if bad >= 0:
            r = int(ids[bad])
            why = ("appears twice in this call" if r in ids[:bad] else
                   "is already free" if 0 <= r < self._bump else
                   f"was never handed out (rows handed out so far: [0, {self._bump}))")
            raise RowStateError(f"free: row {r} at position {bad} {why}; nothing was freed. "
                                "Free each allocated row exactly once.")
        end = self._top + ids.shape[0]
        self._stack = grown_to(self._stack, end)
        self._stack[self._top:end] = ids
        self._top = end

    # -- the interface of a level's slots, shared with DeviceSlots (slots.py), which hands them out on the device
    def alloc_where(self, mask):
        """A fresh slot where the host ``mask`` is set, in order; -1 elsewhere."""
        slots = np.full(mask.shape[0], -1, np.int64)
        slots[mask] = self.alloc(np.count_nonzero(mask))
        return slots

    def free_where(self, slots, mask):
        self.free(slots[mask])

    def room_for(self, n):
        """Always: this allocator grows the tier itself, knowing ``n`` on the host."""
        return True

    def counters(self):
        return np.array([self._top, self._bump], np.int64)

    def settle(self, top, bump, more):
        """Nothing to do: the host counters are exact."""

    @property
    def overhead_bytes(self):
        return self._used.nbytes + self._stack.nbytes

    def stats(self):
        """Rows, slabs, fragmentation and bytes; ``overhead_bytes`` is the allocator's own memory."""
        cap = self.capacity
        return SlabStats(capacity=cap, used=self.n_used, free=self.n_free, slabs=cap // self.slab_rows,
                         fragmentation=self._top / cap if cap else 0.0, storage_bytes=int(self.tier.nbytes),
                         overhead_bytes=self.overhead_bytes)

    def state_dict(self):
        """What a snapshot needs to rebuild this allocator: the bump pointer and the free stack."""
        return {"slab_rows": self.slab_rows, "capacity": self.capacity, "bump": self._bump,
                "free_stack": self._stack[:self._top].copy()}

    def load_state_dict(self, state):
        """Take the state of ``state_dict()``, growing the tier to the capacity it had; checks it first."""
        bump, stack = int(state["bump"]), np.asarray(state["free_stack"], np.int64)
        if int(state["slab_rows"]) != self.slab_rows:
            raise ValueError(f"load_state_dict: the state has slab_rows={state['slab_rows']}, this tier "
                             f"{self.slab_rows}; restore into a tier with the same slab_rows")
        if self.max_rows is not None and bump > self.max_rows:
            raise StoreFullError(f"load_state_dict: the state has handed out {bump} rows, over this allocator's "
                                 f"max_rows={self.max_rows}; raise max_rows to at least {bump}")
        if stack.size and (stack.min() < 0 or stack.max() >= bump or unique(stack).size != stack.size):
            raise ValueError(f"load_state_dict: the free stack holds {stack.size} rows that are not distinct rows "
                             f"of [0, {bump}); the state is corrupt")
        while self.capacity < max(bump, int(state["capacity"])):
            self.tier.add_slab()
        used = np.ones(bump, np.bool_)
        used[stack] = False
        self._used, self._stack, self._top, self._bump = used, stack.copy(), stack.size, bump
