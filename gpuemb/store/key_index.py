"""The key encoder: an open-addressing hash table from int64 feature IDs to int64 row slots (DESIGN.md, "The
embedding store"), so nobody plans capacity.

Slots come from the caller (the store's slab allocator), so inserting is two-phase and the same on either device:

    positions, is_new = index.claim(keys)       # find or claim an entry per key; one True per new key
    index.assign(positions[is_new], slots)      # the caller's fresh slots, in batch order
    index.values_at(positions)                  # the slot of every key

``find``, ``insert_or_find``, ``erase`` and iteration are built on those. The table lives on one device, the
chosen one unless ``xp`` says otherwise (NumPy on the CPU, CuPy on the GPU), and keys are moved there. Growth is
by rehash before a claim that would push the load (live entries + tombstones) past ``max_load``: 2x, or in place
when tombstones dominate. Positions are valid until the next claim, which may rehash. The same key sequence gives
the same slots on either device.

At ``max_load=0.75`` an entry costs 16 bytes / load, about 21 bytes per key just before growing.
"""
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import get_array_module, is_device_array

from .key_index_kernels import EMPTY, NO_SLOT, TOMB, claim_cpu, claim_cuda, lookup_cpu, lookup_cuda


def _as_keys(keys, xp):
    """1-D contiguous int64 keys on the table's device."""
    return xp.ascontiguousarray(xp.asarray(keys, dtype=np.int64).ravel())


class KeyIndex:
    """int64 key -> int64 slot, batched, with a numba CPU twin and a CUDA kernel."""

    def __init__(self, capacity=1024, max_load=0.75, xp=None):
        if not 0 < max_load < 1:
            raise ValueError(f"KeyIndex: max_load={max_load} must lie in (0, 1): probing needs empty rows")
        self.max_load = max_load
        self._reset(backend.xp if xp is None else xp, 1 << max(3, int(capacity - 1).bit_length()))

    def _reset(self, xp, capacity):
        self.entries = xp.full((capacity + 2, 2), NO_SLOT, dtype=np.int64)
        self.entries[:, 0] = EMPTY
        self.entries[capacity + 1, 0] = TOMB  # the side rows carry their own keys, for items()
        self._used = 0  # rows whose key is no longer EMPTY: live entries and tombstones
        self._tombs = 0

    @property
    def capacity(self):
        return self.entries.shape[0] - 2

    @property
    def load_factor(self):
        """Live entries and tombstones over capacity: what probing pays for."""
        return self._used / self.capacity

    @property
    def nbytes(self):
        return self.entries.nbytes

    def __len__(self):
        side = int((self.entries[self.capacity:, 1] != NO_SLOT).sum())
        return self._used - self._tombs + side

    def _kernels(self):
        return (claim_cuda, lookup_cuda) if is_device_array(self.entries) else (claim_cpu, lookup_cpu)

    def _lookup(self, keys, want_slots):
        out = get_array_module(keys).empty(keys.shape[0], dtype=np.int64)
        self._kernels()[1](self.entries, keys, want_slots, out)
        return out

    def find(self, keys):
        """The slot of each key, -1 where absent (or claimed but not yet assigned)."""
        return self._lookup(_as_keys(keys, get_array_module(self.entries)), True)

    def claim(self, keys):
        """``(positions, is_new)``: each key's entry, found or claimed; ``is_new`` on one occurrence per key that
        has no slot yet, the first in the batch. Follow with ``assign(positions[is_new], slots)``."""
        xp = get_array_module(self.entries)
        keys = _as_keys(keys, xp)
        self._reserve(keys)
        pos = xp.empty(keys.shape[0], dtype=np.int64)
        is_new = xp.empty(keys.shape[0], dtype=np.bool_)
        self._used += self._kernels()[0](self.entries, keys, pos, is_new)
        return pos, is_new

    def assign(self, positions, slots):
        """Give the entries at ``positions`` (claimed, new) their ``slots``."""
        self.entries[positions, 1] = slots

    def values_at(self, positions):
        """The slots at ``positions`` from ``claim``; -1 where not yet assigned."""
        return self.entries[positions, 1].clip(NO_SLOT)

    def insert_or_find(self, keys, allocate):
        """``(slots, new_keys_mask)``, inserting absent keys with slots from ``allocate(n) -> n fresh slots``."""
        pos, is_new = self.claim(keys)
        new_pos = pos[is_new]
        self.assign(new_pos, allocate(int(new_pos.shape[0])))
        return self.values_at(pos), is_new

    def erase(self, keys):
        """Remove keys (absent ones and repeats are ignored); returns their slots, each once, in batch order."""
        xp = get_array_module(self.entries)
        pos = self._lookup(_as_keys(keys, xp), False)
        unique, first = xp.unique(pos, return_index=True)
        pos = pos[xp.sort(first[unique >= 0])]
        slots = self.entries[pos, 1]
        self.entries[pos, 1] = NO_SLOT
        in_table = pos[pos < self.capacity]
        self.entries[in_table, 0] = TOMB
        self._tombs += int(in_table.shape[0])
        return slots[slots >= 0]

    def items(self, chunk=1 << 22):
        """``(keys, slots)`` int64 array pairs of every assigned entry, ``chunk`` rows at a time."""
        for start in range(0, self.capacity + 2, chunk):
            rows = self.entries[start:start + chunk]
            rows = rows[rows[:, 1] >= 0]  # erased and empty rows hold NO_SLOT
            yield rows[:, 0].copy(), rows[:, 1].copy()

    __iter__ = items

    def _reserve(self, keys):
        """Rehash before a claim of ``keys`` could push the load past ``max_load``."""
        limit = self.max_load * self.capacity
        if self._used + keys.shape[0] <= limit:
            return
        absent = int((self._lookup(keys, False) < 0).sum())  # an upper bound on the new keys
        if self._used + absent <= limit:
            return
        live = self._used - self._tombs + absent
        if live <= self.max_load * self.capacity / 2:  # tombstones dominate: clearing them halves the load
            return self._rehash(self.capacity)
        capacity = 2 * self.capacity
        while live > self.max_load * capacity:
            capacity *= 2
        self._rehash(capacity)

    def _rehash(self, capacity):
        xp = get_array_module(self.entries)
        table = self.entries[:self.capacity]
        rows = table[(table[:, 0] != EMPTY) & (table[:, 0] != TOMB)]
        side = self.entries[self.capacity:, 1].copy()
        self._reset(xp, capacity)
        pos = xp.empty(rows.shape[0], dtype=np.int64)
        self._used = self._kernels()[0](self.entries, rows[:, 0].copy(), pos, xp.empty(rows.shape[0], np.bool_))
        self.entries[pos, 1] = rows[:, 1]  # claimed-but-unassigned entries keep CLAIMED
        self.entries[capacity:, 1] = side
