"""One level of the embedding store: the rows of some keys in one tier, bounded or not, evicting by a policy.

A table is a chain of levels, top first: the device rows the lookup reads, then optionally a host cache, then the
home level that holds every key (docs/design.md, "The embedding store"). A level above the home is a ``CacheLevel``
(``cache.py``: misses come from below, dirty rows are written back); the bottom one is the ``HomeLevel``
(``home.py``: absent keys are new). Both are a ``RowLevel``: its own ``KeyIndex`` (key -> slot), its slots
(``DeviceSlots`` on a device tier, ``SlabAllocator`` on a host one), and beside the tier, per slot, only what it
reads: the row's update count (``steps``), unless the tier keeps it beside the row (the SSD tier); in a bounded
level, the key (to forget an evicted one) and the policy's use and pin counts; in a cache, a dirty flag (changed
since it came from below). A bounded level evicts by its policy when full. Pinned rows are never evicted: a batch
pins its rows from lookup (or prefetch) until its update, so its slots stay valid. An unbounded level (every host
or ssd home, a device home without ``max_rows``) never evicts, so it keeps no key, pin or use per slot: at a
terabyte of keys those would be most of its memory (docs/store.md, "Bytes a key").

The bookkeeping lives beside the rows, on the tier's device, and is vectorised per batch by masks rather than by
compacting: a batch's keys, their slots and "is it a miss" are arrays of the batch's size, and nothing counts them
on the host. So a device level's lookup and update read nothing back. What must be decided on the host (adding
rows to the tier, rehashing the index, evicting under the bound) is decided from upper bounds that grow by the
batch's size; only when a bound says the level might be full does it read the true counts, once, in one small
copy (``_settle``): per batch of U unique keys, a read when the index's load, the tier's rows or the level's bound
is within U of its limit, and then at most one (a device table's step knows only N, its keys, for the count of its
unique keys stays on the device: ``acquire``). A lookup's settle then makes room for ``AHEAD`` batches (at most an
eighth of the keys), so an unbounded level reads once in several batches, not at every one near its limit.
"""
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import to_host

from .errors import StoreFullError
from .key_index import KeyIndex
from .slab import SlabAllocator, grown_to
from .slots import DeviceSlots
from .tiers import DeviceTier

AHEAD = 4  # batches of room a lookup's level makes when it reads its counts (``RowLevel._settle``)


class EvictionPolicy:
    """Which rows of a bounded level to evict: least recently used (``lru``) or least frequently used (``lfu``,
    ties going to the least recent, then to the lowest slot). Per slot: the batch tick of the last use, the use
    count, and pins, in arrays of ``xp`` one longer than the capacity: the last row takes the writes of the
    positions a mask leaves out (``dump``)."""

    def __init__(self, policy, xp=np):
        self.lfu, self.xp = policy == "lfu", xp
        self.tick = 0  # batch ticks, counted on the host: 2**31 batches of one table is far off
        self.last, self.count = xp.zeros(1, np.int32), xp.zeros(1, np.int32)
        self.pins, self.occupied = xp.zeros(1, np.int32), xp.zeros(1, np.bool_)

    @property
    def nbytes(self):
        return self.last.nbytes + self.count.nbytes + self.pins.nbytes + self.occupied.nbytes

    @property
    def dump(self):
        return self.last.shape[0] - 1

    def grow(self, capacity):
        old = self.dump
        self.last, self.count = grown_to(self.last, capacity + 1), grown_to(self.count, capacity + 1)
        self.pins, self.occupied = grown_to(self.pins, capacity + 1), grown_to(self.occupied, capacity + 1)
        if self.dump != old:  # the old dump row is now an ordinary one: clear what masked writes left there
            self.last[old] = self.count[old] = self.pins[old] = 0
            self.occupied[old] = False

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

    def candidates(self):
        """The slots that may be evicted, as a mask: occupied, unpinned, not the dump row."""
        cand = self.occupied & (self.pins == 0)
        cand[-1:] = False
        return cand

    def n_pinned(self):
        return int(to_host(self.xp.count_nonzero(self.occupied[:-1] & (self.pins[:-1] > 0))))

    def victims(self, n, n_candidates=None):
        """``n`` candidate slots with the lowest scores (ties to the lowest slot), or None when fewer than ``n``
        are candidates; ``n_candidates`` when the caller has read it already."""
        xp, cand = self.xp, self.candidates()
        if n_candidates is None:
            n_candidates = int(to_host(xp.count_nonzero(cand)))
        if n_candidates < n:
            return None
        score = (self.count.astype(np.int64) << 32) + self.last if self.lfu else self.last.astype(np.int64)
        score = xp.where(cand, score, np.iinfo(np.int64).max)
        return xp.argsort(score, kind="stable")[:n]


class NoEviction:
    """The policy of an unbounded level, which never evicts: it keeps nothing per slot, so its growth, inserts,
    removals, uses and pins are all one no-op."""
    nbytes = 0

    def ignore(self, slots_or_capacity):
        """Nothing to record."""

    grow = insert = remove = touch = pin = unpin = ignore


class PinsOnly(NoEviction):
    """The policy of an unbounded level whose keys the table may drop (an evict rule): it never evicts, but keeps
    each slot's pins (4 bytes a slot), so that evicting skips the rows of batches between lookup and update."""

    def __init__(self, xp=np):
        self.pins = xp.zeros(1, np.int32)

    @property
    def nbytes(self):
        return self.pins.nbytes

    def grow(self, capacity):
        old = self.pins.shape[0] - 1
        self.pins = grown_to(self.pins, capacity + 1)
        self.pins[old] = 0  # the old dump row is an ordinary one now

    def insert(self, slots):
        self.pins[slots] = 0

    def pin(self, slots):
        self.pins[slots] += 1

    def unpin(self, slots):
        self.pins[slots] -= 1


class RowLevel:
    """The rows of some keys in ``tier``: at most ``bound`` of them (None: grows), evicting by ``policy``.

    ``what`` names the setting that sizes the bound, for error messages. A subclass says where the rows of absent
    keys come from (``_fetch``), what becomes of the rows it evicts (``_evicting``) and what ``flush`` does, and
    whether it writes rows down (``writes_down``: then it keeps dirty flags).
    """
    writes_down = False
    share = 1  # how many batched tables' settings the bound sums (a cache of a store of several)
    life = None  # a home level's KeyLife, which stamps the ticks of the rows it inserts

    def __init__(self, tier, bound=None, policy="lru", what="max_rows", ticks=False, pins=False, owners=False):
        self.tier, self.bound, self.what = tier, bound, what
        device = isinstance(tier, DeviceTier)
        self.xp = xp = backend.xp if device else np  # the bookkeeping lives beside the rows
        self.index = KeyIndex(xp=xp)
        self.alloc = DeviceSlots(tier, xp) if device else SlabAllocator(tier)
        bounded = bound is not None
        self.policy = EvictionPolicy(policy, xp) if bounded else PinsOnly(xp) if pins else NoEviction()
        # Per slot, each array only where it is read; each has a last row more, the dump row (EvictionPolicy).
        self.keys = xp.zeros(1, np.int64) if bounded else None  # to forget evicted keys (and write them down)
        self.steps = None if tier.stores_steps else xp.zeros(1, np.int32)  # each row's update count
        self.dirty = xp.zeros(1, np.bool_) if self.writes_down else None  # changed since it came from below
        # The tick of each row's last change, where the table asks (deltas, eviction by age): written by the table's
        # ``KeyLife`` (keylife.py) alone, ``life`` here, which a home level keeps.
        self.touched = xp.zeros(1, np.int32) if ticks else None
        # The table each row belongs to, in a store that batches several (``table.py``): given by the ``tags``
        # of the acquire or put that inserts the key.
        self.owners = xp.zeros(1, np.int32) if owners else None
        self.counters = xp.zeros(3, np.int64)  # hits, misses, evictions: counted where the masks are
        self.used_bound = 0  # host: at most this many rows are held

    def __len__(self):
        return self.alloc.n_used

    hits = property(lambda self: int(to_host(self.counters)[0]))
    misses = property(lambda self: int(to_host(self.counters)[1]))
    evictions = property(lambda self: int(to_host(self.counters)[2]))

    @property
    def per_slot(self):
        """The per-slot arrays this level keeps besides the policy's."""
        return [a for a in (self.keys, self.steps, self.dirty, self.touched, self.owners) if a is not None]

    @property
    def overhead_bytes(self):
        """Index, allocator and per-slot bookkeeping bytes: everything but the rows."""
        return (self.index.nbytes + self.alloc.overhead_bytes + self.policy.nbytes + self.counters.nbytes
                + sum(a.nbytes for a in self.per_slot))

    def here(self, a):
        """``a`` on this level's device: one counted copy where it crosses, none where it is there already."""
        return backend.to_device(a) if self.xp is backend.xp else to_host(a)

    def _where(self, slots, mask):
        """``slots`` where ``mask`` is set, the dump row elsewhere: a masked write without compacting. Every
        per-slot array, the policy's too, grows alike (``_grow``), so they share the dump row; a level that keeps
        none passes the result only to ``NoEviction``, which ignores it."""
        kept = self.per_slot
        return self.xp.where(mask, slots, kept[0].shape[0] - 1 if kept else 0)

    def locate(self, keys):
        """The slot of each key here (int64, on this level's device), -1 where absent."""
        return self.index.find(keys)

    def read(self, slots):
        """``(rows [n, width], steps [n])`` at ``slots``."""
        if self.steps is None:
            return self.tier.read(slots, with_steps=True)
        return self.tier.read(slots), self.steps[slots]

    def write(self, slots, rows, steps, where=None):
        """Store ``rows`` and their ``steps`` at ``slots``, only where the mask ``where`` is set when given."""
        if self.steps is None:
            self.tier.write(slots, rows, where=where, steps=steps)
            return
        self.tier.write(slots, rows, where=where)
        self.steps[slots if where is None else self._where(slots, where)] = steps

    def changed(self, slots):
        """The rows at ``slots`` are newer than below: a level that writes down marks them dirty."""
        if self.dirty is not None:
            self.dirty[slots] = True

    def acquire(self, keys, tags=None, valid=None):
        """Slots of ``keys`` (distinct, int64 on this level's device), bringing absent rows here; each gets one pin
        (see ``unpin``). ``tags`` (int32, one a key, or None): the table of each key, in a store of several.

        ``valid`` (a device mask, or None: all): the keys of a fixed-size unique (``unique_keys_fixed``), whose
        padding (copies of the last valid key) gets slot -1: the dump row of every per-slot array and the tier's
        spare row (``DeviceTier``), which no key owns. So padding inserts no key, pins, touches and counts nothing,
        and a write there (an update's) changes no key's row. The host's bounds grow by all ``N`` keys."""
        slots = self.locate(keys)
        miss = slots < 0
        if valid is not None:
            miss &= valid
        # Before any eviction below: this batch's rows must stay.
        self.policy.pin(self._where(slots, ~miss if valid is None else valid & ~miss))
        self._count(miss, valid)
        slots = self._insert(keys, miss, slots, tags, ahead=AHEAD, valid=valid)
        if valid is not None:
            slots = self.xp.where(valid, slots, -1)
        rows, steps = self._fetch(keys, miss, tags)
        self.write(slots, rows, steps, where=miss)
        self.policy.pin(self._where(slots, miss))
        self.policy.touch(slots)
        return slots

    def _count(self, miss, valid=None):
        xp = self.xp
        n = xp.count_nonzero(miss)
        self.counters[:2] += xp.stack([(miss.shape[0] if valid is None else xp.count_nonzero(valid)) - n, n])

    def unpin(self, slots):
        self.policy.unpin(slots)

    def take(self, keys, tags=None):
        """``(rows, steps)`` of ``keys`` (of tables ``tags``) for the level above, brought here first."""
        slots = self.acquire(keys, tags)
        got = self.read(slots)
        self.unpin(slots)
        return got

    def put(self, keys, rows, steps, tags=None):
        """Store rows written back from above (or imported, of tables ``tags``), making room as needed; they are
        dirty here."""
        keys = self.here(keys)
        slots = self.locate(keys)
        miss = slots < 0
        held = self._where(slots, ~miss)
        self.policy.pin(held)  # making room must not evict the rows being overwritten
        slots = self._insert(keys, miss, slots, None if tags is None else self.here(tags))
        self.policy.unpin(held)
        self.write(slots, rows, self.here(steps))
        self.changed(slots)
        self.policy.touch(slots)

    def drop(self, keys):
        """Forget ``keys`` here without writing them down (absent ones are ignored)."""
        slots = self.index.erase(self.here(keys))
        self._release(slots)

    def flush(self, chunk=1 << 16):
        """Write every dirty row down to the home, so the home holds the newest of every row."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _fetch(self, keys, miss, tags=None):
        """``(rows [n, width], steps [n])`` of ``keys`` (of tables ``tags``) where ``miss`` is set (absent here);
        any rows elsewhere."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _evicting(self, slots):
        """Called with the slots about to be evicted, before their keys are forgotten."""
        raise NotImplementedError(f"{type(self).__name__} leaves this to CacheLevel and HomeLevel")

    def _insert(self, keys, miss, slots, tags=None, ahead=1, valid=None):
        """``slots`` with fresh ones where ``miss`` is set, for the absent ``keys`` (distinct, of tables ``tags``);
        makes room first, and when it must read, room for ``ahead`` more batches of as many keys. ``valid``: as
        ``acquire`` takes it; the padding shares its key's entry, so only the new entries are assigned there."""
        fresh = self._settle(keys.shape[0], miss, ahead)
        pos, is_new = self.index.claim(keys, fresh)  # for distinct keys, is_new is miss
        new = self.alloc.alloc_where(is_new)
        if valid is None:
            self.index.assign(pos, self.xp.where(is_new, new, slots))
        else:  # the others' entries hold their slots already (a padding copy of a new key would write -1)
            self.index.assign(pos, new, where=is_new)
        self._grow()
        put = self._where(new, is_new)
        self.policy.insert(put)
        if self.keys is not None:
            self.keys[put] = keys
        if self.dirty is not None:
            self.dirty[put] = False
        if self.touched is not None:
            self.life.stamp(put)
        if self.owners is not None and tags is not None:
            self.owners[put] = tags
        return self.xp.where(is_new, new, slots)

    def _grow(self):
        """Grow the per-slot arrays, the policy's too, to the tier's rows and the dump row."""
        cap = self.tier.capacity
        grown = (None if a is None else grown_to(a, cap + 1)
                 for a in (self.keys, self.steps, self.dirty, self.touched, self.owners))
        self.keys, self.steps, self.dirty, self.touched, self.owners = grown
        self.policy.grow(cap)

    def _settle(self, n, miss, ahead=1):
        """Make room for at most ``n`` new rows (those of ``miss``) and return a bound on the new keys. Reads
        nothing while the host's bounds say the index, the tier and the level's bound have room for ``n`` more;
        else reads the true counts in one small copy, evicts what the bound asks, and grows what must grow, with
        room for ``ahead`` batches of ``n`` more."""
        bounded = self.bound is not None and self.used_bound + n > self.bound
        if not bounded and self.index.room_for(n) and self.alloc.room_for(n):
            self.used_bound += n
            return n
        xp = self.xp
        cand = self.policy.candidates() if bounded else xp.zeros(1, np.bool_)
        top, bump, used_rows, tombs, misses, n_cand = to_host(xp.concatenate([
            self.alloc.counters(), self.index.counts,
            xp.stack([xp.count_nonzero(miss), xp.count_nonzero(cand)])])).tolist()
        held = bump - top
        over = held + misses - (self.bound if self.bound is not None else held + misses)
        if over > 0:
            self._evict(over, misses, n_cand)
            held -= over
        # The host's bounds grow by every batch's keys, new or not: a level that read when within one batch of a
        # limit would read on every batch while its keys are known. So the tier gets rows, and the index room, for
        # ``ahead`` batches past this one's misses (AHEAD for a lookup, against a read a step; an import sizes for
        # the batch it brings and one more, as before).
        # An eighth of the keys at most: a small table keeps its bytes a key (docs/store.md, "Bytes a key").
        more = 0 if self.bound is not None else min((ahead - 1) * n, held // 8)  # a bounded level reads to evict
        self.index.settle(used_rows, held, misses, ahead=more)
        self.alloc.settle(top + max(over, 0), bump, misses + n + more)
        self.used_bound = held + misses
        return misses

    def _evict(self, n, wanted, n_candidates):
        victims = self.policy.victims(n, n_candidates)
        if victims is None:
            pinned, n = self.policy.n_pinned(), self.share
            # a store of n batched tables sums their settings: the advice is for each table's own
            whose, setting = (f"{self.what}={self.bound}", self.what) if n == 1 else (
                f"{self.what}={self.bound}, the sum of {n} batched tables' {self.what} ({self.bound // n} each)",
                f"each table's {self.what}")
            raise StoreFullError(
                f"{type(self.tier).__name__}: {wanted} new rows do not fit in {whose}: {len(self)} rows are held, "
                f"{pinned} of them pinned by batches not yet updated; raise {setting} to at least "
                f"{-(-(pinned + wanted) // n)}, or make batches with fewer unique keys")
        self._evicting(victims)
        self.index.erase(self.keys[victims])
        self._release(victims)
        self.counters[2:] += n

    def _release(self, slots):
        self.alloc.free_where(slots, self.xp.ones(slots.shape[0], np.bool_))
        self.policy.remove(slots)
