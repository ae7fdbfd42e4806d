"""One level of the embedding store: the rows of some keys in one tier, bounded or not, evicting by a policy.

A table is a chain of levels, top first: the device rows the lookup reads, then optionally a host cache, then the
home level that holds every key (docs/design.md, "The embedding store"). A level above the home is a ``CacheLevel``
(``cache.py``: misses come from below, dirty rows are written back); the bottom one is the ``HomeLevel``
(``home.py``: absent keys are new). Both are a ``RowLevel``: its own ``KeyIndex`` (key -> slot) and
``SlabAllocator``, and beside the tier, per slot: the key, the row's update count (``steps``), a dirty flag
(changed since it came from below), a pin count, and the policy's bookkeeping. A bounded level evicts by its
policy when full. Pinned rows are never evicted: a batch pins its rows from lookup (or prefetch) until its update,
so its slots stay valid.

The bookkeeping is NumPy on the host, vectorised per batch: a level scans its slots once per eviction
(``argpartition`` over the unpinned ones), never a Python loop per row.
"""
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import get_array_module, to_host

from .errors import StoreFullError
from .key_index import KeyIndex
from .slab import SlabAllocator, grown_to
from .tiers import DeviceTier


class EvictionPolicy:
    """Which rows of a bounded level to evict: least recently used (``lru``) or least frequently used (``lfu``,
    ties going to the least recent). Per slot: the batch tick of the last use, the use count, and pins."""

    def __init__(self, policy):
        self.lfu = policy == "lfu"
        self.tick = 0
        self.last = np.zeros(0, np.int32)  # batch ticks: 2**31 batches of one table is far off
        self.count = np.zeros(0, np.int32)
        self.pins = np.zeros(0, np.int32)
        self.occupied = np.zeros(0, np.bool_)

    @property
    def nbytes(self):
        return self.last.nbytes + self.count.nbytes + self.pins.nbytes + self.occupied.nbytes

    def grow(self, capacity):
        self.last, self.count = grown_to(self.last, capacity), grown_to(self.count, capacity)
        self.pins, self.occupied = grown_to(self.pins, capacity), grown_to(self.occupied, capacity)

    def insert(self, slots):
        self.occupied[slots], self.count[slots], self.pins[slots] = True, 0, 0

    def remove(self, slots):
        self.occupied[slots] = False

    def touch(self, slots):
        """One use of each of ``slots`` (distinct), all in this batch."""
        self.tick += 1
        self.last[slots] = self.tick
        self.count[slots] += 1

    def pin(self, slots):
        self.pins[slots] += 1

    def unpin(self, slots):
        self.pins[slots] -= 1

    def n_pinned(self):
        return int(np.count_nonzero(self.occupied & (self.pins > 0)))

    def victims(self, n):
        """``n`` unpinned occupied slots with the lowest scores, or None when fewer than ``n`` are unpinned."""
        cand = np.flatnonzero(self.occupied & (self.pins == 0))
        if cand.size < n:
            return None
        if cand.size == n:
            return cand
        last = self.last[cand].astype(np.int64)
        score = (self.count[cand].astype(np.int64) << 32) + last if self.lfu else last
        return cand[np.argpartition(score, n - 1)[:n]]


class RowLevel:
    """The rows of some keys in ``tier``: at most ``bound`` of them (None: grows), evicting by ``policy``.

    ``what`` names the setting that sizes the bound, for error messages. A subclass says where the rows of absent
    keys come from (``_fetch``), what becomes of the rows it evicts (``_evicting``) and what ``flush`` does.
    """

    def __init__(self, tier, bound=None, policy="lru", what="max_rows"):
        self.tier, self.bound, self.what = tier, bound, what
        self.index = KeyIndex(xp=backend.xp if isinstance(tier, DeviceTier) else np)  # beside the rows
        self.alloc = SlabAllocator(tier)
        self.policy = EvictionPolicy(policy)
        self.keys = np.zeros(0, np.int64)   # the key in each slot
        self.steps = np.zeros(0, np.int32)  # each row's update count, moved with the row
        self.dirty = np.zeros(0, np.bool_)
        self.hits = self.misses = self.evictions = 0

    def __len__(self):
        return self.alloc.n_used

    @property
    def overhead_bytes(self):
        """Index, allocator and per-slot bookkeeping bytes: everything but the rows."""
        return (self.index.nbytes + self.alloc.stats().overhead_bytes + self.policy.nbytes + self.keys.nbytes
                + self.steps.nbytes + self.dirty.nbytes)

    def locate(self, keys):
        """The slot of each key here (host int64), -1 where absent."""
        return to_host(self.index.find(keys))

    def acquire(self, keys):
        """Slots of ``keys`` (distinct, host int64), bringing absent rows here; each gets one pin (see ``unpin``)."""
        slots = self.locate(keys)
        miss = slots < 0
        hit = slots[~miss]
        self.policy.pin(hit)  # before any eviction below: this batch's rows must stay
        self.hits += hit.size
        if miss.any():
            missing = keys[miss]
            self.misses += missing.size
            new = self._insert(missing)
            rows, steps = self._fetch(missing)
            self.tier.write(new, rows)
            self.steps[new] = steps
            self.policy.pin(new)
            slots[miss] = new
        self.policy.touch(slots)
        return slots

    def unpin(self, slots):
        self.policy.unpin(slots)

    def take(self, keys):
        """``(rows, steps)`` of ``keys`` for the level above, brought here first."""
        slots = self.acquire(keys)
        rows = self.tier.read(slots)
        self.unpin(slots)
        return rows, self.steps[slots]

    def put(self, keys, rows, steps):
        """Store rows written back from above (or imported), making room as needed; they are dirty here."""
        slots = self.locate(keys)
        miss = slots < 0
        if miss.any():
            self.policy.pin(slots[~miss])  # making room must not evict the rows being overwritten
            slots[miss] = self._insert(keys[miss])
            self.policy.unpin(slots[~miss])
        self.tier.write(slots, rows)
        self.steps[slots] = steps
        self.dirty[slots] = True
        self.policy.touch(slots)

    def drop(self, keys):
        """Forget ``keys`` here without writing them down (absent ones are ignored)."""
        slots = to_host(self.index.erase(keys))
        self._release(slots)

    def flush(self, chunk=1 << 16):
        """Write every dirty row down to the home, so the home holds the newest of every row."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _fetch(self, keys):
        """``(rows [n, width], steps [n])`` of ``keys``, absent here."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _evicting(self, slots):
        """Called with the slots about to be evicted, before their keys are forgotten."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _insert(self, keys):
        """Fresh slots for absent ``keys``, evicting first when the bound would be passed."""
        over = len(self) + keys.size - (self.bound or np.inf)
        if over > 0:
            self._evict(int(over), keys.size)
        xp = get_array_module(self.index.keys)
        slots = to_host(self.index.insert_or_find(keys, lambda n: xp.asarray(self.alloc.alloc(n)))[0])
        cap = self.tier.capacity
        self.keys, self.steps, self.dirty = (grown_to(a, cap) for a in (self.keys, self.steps, self.dirty))
        self.policy.grow(cap)
        self.policy.insert(slots)
        self.keys[slots] = keys
        self.dirty[slots] = False
        return slots

    def _evict(self, n, wanted):
        victims = self.policy.victims(n)
        if victims is None:
            pinned = self.policy.n_pinned()
            raise StoreFullError(
                f"{type(self.tier).__name__}: {wanted} new rows do not fit in {self.what}={self.bound}: "
                f"{len(self)} rows are held, {pinned} of them pinned by batches not yet updated; raise "
                f"{self.what} to at least {pinned + wanted}, or make batches with fewer unique keys")
        self._evicting(victims)
        self.index.erase(self.keys[victims])
        self._release(victims)
        self.evictions += victims.size

    def _release(self, slots):
        self.alloc.free(slots)
        self.policy.remove(slots)
