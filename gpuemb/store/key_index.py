"""The key encoder: an open-addressing hash table from int64 feature IDs to row slots (docs/design.md, "The embedding
store"), so nobody plans capacity.

Slots come from the caller (the store's slab allocator), so inserting is two-phase and the same on either device:

    positions, is_new = index.claim(keys)       # find or claim an entry per key; one True per new key
    index.assign(positions[is_new], slots)      # the caller's fresh slots, in batch order
    index.values_at(positions)                  # the slot of every key

``find``, ``insert_or_find``, ``erase`` and iteration are built on those. The table lives on one device, the
chosen one unless ``xp`` says otherwise (NumPy on the CPU, CuPy on the GPU), and keys are moved there. Positions
are valid until the next claim, which may rehash. The same key sequence gives the same slots on either device.

Memory: a row is an int64 key and an int32 slot, 12 bytes, so a level holds at most 2**31 rows (``MAX_SLOT``; shard
past that). Before a claim that would push the load (live entries + tombstones) past ``max_load``, the table is
rehashed to ``GROWTH / max_load`` rows per live key (new keys of the claim included): it grows by about 1.4x when
full of live keys, and keeps or even shrinks its size when tombstones fill it. So between rehashes the load runs
from ``max_load / GROWTH`` up to ``max_load``, and per key the index costs

    12 * GROWTH / max_load = 12 * 1.4 / 0.8 = 21 bytes   right after a rehash (the worst),
    12 / max_load          = 12 / 0.8       = 15 bytes   just before one,

at every size above the initial capacity. The slab allocator adds 1 to 2 bytes per row (its used flags, grown by
doubling), so index and allocator stay under 24 bytes per key. Growing by 1.4x rather than 2x moves each key
2.5 times on average instead of once, but a rehash walks the old table in order and, by fastrange, writes the new
one nearly in order, which is cheap next to the random probes of a claim.
"""
import math

import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import get_array_module, is_device_array, to_host

from .errors import StoreFullError
from .key_index_kernels import CPU, CUDA, EMPTY, MAX_CAPACITY, NO_SLOT, TOMB

GROWTH = 1.4
MAX_SLOT = np.iinfo(np.int32).max  # slots are int32; the negative values are the kernels' states
_SHARD = "shard the table over more ranks (row-wise placement) or split it into several tables"


def _as_keys(keys, xp):
    """1-D contiguous int64 keys on the table's device."""
    return xp.ascontiguousarray(xp.asarray(keys, dtype=np.int64).ravel())


class KeyIndex:
    """int64 key -> slot in ``[0, MAX_SLOT]``, batched, with a numba CPU twin and a CUDA kernel.

    ``capacity`` is the initial number of rows and the least a rehash shrinks to.
    """

    def __init__(self, capacity=1024, max_load=0.8, xp=None):
        if not 0 < max_load < 1:
            raise ValueError(f"KeyIndex: max_load={max_load} must lie in (0, 1): probing needs empty rows")
        self.max_load, self.min_capacity = max_load, max(8, int(capacity))
        if self.min_capacity > MAX_CAPACITY:
            raise ValueError(f"KeyIndex: capacity={capacity} is over the {MAX_CAPACITY} rows one index can hash "
                             f"into; {_SHARD}")
        self._reset(backend.xp if xp is None else xp, self.min_capacity)

    def _reset(self, xp, capacity):
        self.keys = xp.full(capacity + 2, EMPTY, dtype=np.int64)
        self.keys[capacity + 1] = TOMB  # the side rows carry their own keys, for items()
        self.slots = xp.full(capacity + 2, NO_SLOT, dtype=np.int32)
        # [rows whose key is no longer EMPTY (live entries and tombstones), tombstones], on the table's device: a
        # claim adds to them there, so it never waits for the count. The host keeps an upper bound of the first,
        # raised by every claim's size, and reads the truth only when that bound passes max_load (``_reserve``).
        self.counts = xp.zeros(2, np.int64)
        self.used_bound = 0

    @property
    def xp(self):
        """The array module of the table: numpy or cupy."""
        return get_array_module(self.keys)

    @property
    def capacity(self):
        return self.keys.shape[0] - 2

    @property
    def load_factor(self):
        """Live entries and tombstones over capacity: what probing pays for (a read of the device's count)."""
        return int(to_host(self.counts)[0]) / self.capacity

    @property
    def nbytes(self):
        return self.keys.nbytes + self.slots.nbytes

    def __len__(self):
        side = int(to_host((self.slots[self.capacity:] != NO_SLOT).sum()))
        used, tombs = to_host(self.counts).tolist()
        return used - tombs + side

    def _kernels(self):
        return CUDA if is_device_array(self.keys) else CPU

    def _lookup(self, keys, want_slots):
        out = get_array_module(keys).empty(keys.shape[0], dtype=np.int64)
        self._kernels().lookup(self.keys, self.slots, keys, want_slots, out)
        return out

    def find(self, keys):
        """The slot of each key (int64), -1 where absent (or claimed but not yet assigned)."""
        return self._lookup(_as_keys(keys, self.xp), True)

    def claim(self, keys, fresh_at_most=None):
        """``(positions, is_new)``: each key's entry, found or claimed; ``is_new`` on one occurrence per key that
        has no slot yet, the first in the batch. Follow with ``assign(positions[is_new], slots)``.
        ``fresh_at_most``: a bound, known to the caller, on the entries this claim adds (default: one per key)."""
        xp = self.xp
        keys = _as_keys(keys, xp)
        if keys.shape[0] > MAX_SLOT - 2:  # the CUDA claim marks with -(batch index + 3) in an int32 slot
            raise ValueError(f"KeyIndex.claim: a batch of {keys.shape[0]} keys is over {MAX_SLOT - 2}; split it")
        more = keys.shape[0] if fresh_at_most is None else fresh_at_most
        self._reserve(keys, more)
        pos = xp.empty(keys.shape[0], dtype=np.int64)
        is_new = xp.empty(keys.shape[0], dtype=np.bool_)
        self.counts[:1] += self._kernels().claim(self.keys, self.slots, keys, pos, is_new)
        self.used_bound += more
        return pos, is_new

    def room_for(self, n):
        """Whether a claim adding ``n`` entries surely stays under ``max_load`` without a read."""
        return self.used_bound + n <= self.max_load * self.capacity

    def settle(self, used, live, more, ahead=0):
        """Take the true count of ``used`` rows (just read) and of the ``live`` keys, and make room for ``more``
        entries, and for ``ahead`` more after them (rehashing a little early saves the next claims a read)."""
        self.used_bound = used
        if used + more + ahead > self.max_load * self.capacity:
            self._rehash(self._capacity_for(live + more + ahead), live)

    def assign(self, positions, slots, where=None):
        """Give the entries at ``positions`` (claimed, new) their ``slots``, each in ``[0, MAX_SLOT]``; with a mask
        ``where``, only where it is set (on the device without counting them: ``positions`` may repeat where unset).

        The range is checked for host slots; device slots come from the store's ``DeviceSlots``, which checks on
        the host that it never hands out more than ``MAX_SLOT + 1`` (``settle``), so no read is needed here."""
        slots = self.xp.asarray(slots)
        if where is not None:
            if is_device_array(slots):
                self._kernels().assign(self.slots, positions, slots, where)
                return
            positions, slots = positions[where], slots[where]
        if not is_device_array(slots) and slots.size and (int(slots.min()) < 0 or int(slots.max()) > MAX_SLOT):
            raise StoreFullError(
                f"KeyIndex.assign: slots {int(slots.min())}..{int(slots.max())} do not fit: the index keeps int32 "
                f"slots in [0, {MAX_SLOT}], so one level holds at most 2**31 rows; {_SHARD}")
        self.slots[positions] = slots

    def values_at(self, positions):
        """The slots (int64) at ``positions`` from ``claim``; -1 where not yet assigned."""
        return self.slots[positions].clip(NO_SLOT).astype(np.int64)

    def insert_or_find(self, keys, allocate):
        """``(slots, new_keys_mask)``, inserting absent keys with slots from ``allocate(n) -> n fresh slots``."""
        pos, is_new = self.claim(keys)
        new_pos = pos[is_new]
        self.assign(new_pos, allocate(int(new_pos.shape[0])))
        return self.values_at(pos), is_new

    def erase(self, keys):
        """Remove keys (absent ones and repeats are ignored); returns their slots (int64), each once, in batch
        order."""
        xp = self.xp
        pos = self._lookup(_as_keys(keys, xp), False)
        unique, first = xp.unique(pos, return_index=True)
        pos = pos[xp.sort(first[unique >= 0])]
        slots = self.slots[pos].astype(np.int64)
        self.slots[pos] = NO_SLOT
        in_table = pos[pos < self.capacity]
        self.keys[in_table] = TOMB
        self.counts[1:] += in_table.shape[0]
        return slots[slots >= 0]

    def items(self, chunk=1 << 22):
        """``(keys, slots)`` int64 array pairs of every assigned entry, ``chunk`` rows at a time."""
        for start in range(0, self.capacity + 2, chunk):
            slots = self.slots[start:start + chunk]
            held = slots >= 0  # erased and empty rows hold NO_SLOT
            yield self.keys[start:start + chunk][held], slots[held].astype(np.int64)

    __iter__ = items

    def _reserve(self, keys, more):
        """Rehash before a claim of ``keys`` adding at most ``more`` entries could push the load past ``max_load``.
        Reads the device's counts (a sync) only when the host's bound says the load might pass it."""
        limit = self.max_load * self.capacity
        if self.used_bound + more <= limit:
            return
        used, tombs = (int(v) for v in to_host(self.counts).tolist())
        self.used_bound = used
        if used + more <= limit:
            return
        absent = keys[self._lookup(keys, False) < 0]
        if used + absent.shape[0] <= limit:
            return
        absent = self.xp.sort(absent)  # repeats of a new key claim one row: do not size for them
        new = int(to_host((absent[1:] != absent[:-1]).sum())) + 1
        if used + new <= limit:
            return
        self._rehash(self._capacity_for(used - tombs + new), used - tombs)

    def _capacity_for(self, live):
        capacity = max(self.min_capacity, math.ceil(live * GROWTH / self.max_load))
        if capacity > MAX_CAPACITY:
            raise StoreFullError(f"KeyIndex: {live} keys need {capacity} rows, over the {MAX_CAPACITY} one index "
                                 f"can hash into; {_SHARD}")
        return capacity

    def _rehash(self, capacity, live):
        """Move the ``live`` entries (a count the caller read) to a fresh table of ``capacity`` rows."""
        old_keys, old_slots = self.keys, self.slots
        self._reset(self.xp, capacity)
        self._kernels().rehash(old_keys, old_slots, self.keys, self.slots)
        self.keys[capacity:], self.slots[capacity:] = old_keys[-2:], old_slots[-2:]
        self.counts[:1] = live
        self.used_bound = live
