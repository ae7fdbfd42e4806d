"""EmbeddingTable: int64 feature IDs in, differentiable rows out, rows updated in place by the table's own rule.

A lookup takes the batch's unique keys, makes sure their rows are in the top level's device rows (inserting new
keys with rows from the initializer, or bringing them up through the caches), gathers their weights ``[U, D]``
and runs ``EmbeddingBagFunction`` on them with each key's position among the unique keys as its slot. So the
backward's deterministic sort-based sum hands ``(unique positions, summed_row_grads)`` to ``_backward``, whose
``apply_update`` reads those full rows, runs the fused ``apply_rows`` (``update_rows``) with the table's rule and lr,
and writes them back. The batch's keys, unique keys and pinned slots are one handle from lookup (or prefetch) to
update (``batch.py``), and the keys' clock, ticks, admission and drops change in one place (``keylife.py``).
Nothing table-sized is ever built, and the result does not depend on where the rows live: a tiered table trains bit for
bit like a device one.

Levels (``level.RowLevel``), top first: placement ``device`` is one ``HomeLevel`` (bounded by ``max_rows``,
dropping least-used keys past it); ``host``/``ssd`` are a device ``CacheLevel`` of ``cache_rows`` over the home
tier, with an optional host cache of ``host_cache_rows`` over an ssd home.
"""
import dataclasses

import numpy as np

from gpuemb.autograd import Tensor, backend, is_grad_enabled
from gpuemb.autograd.backend import to_host
from gpuemb.key_types import integer_keys
from gpuemb.kernels.embedding_bag import MODES, EmbeddingBagFunction, embedding_bag
from gpuemb.kernels.unique import unique_keys, unique_keys_fixed
from gpuemb.optim import update_rows

from .batch import InFlight, watch
from .cache import CacheLevel
from .delta import changes_since
from .eviction import expired, unpinned
from .home import HomeLevel
from .init import initial_weights
from .keylife import KeyLife
from .ordered import OrderedLock
from .mixing import unmixed
from .row_format import RowFormat
from .ssd_tier import SsdTier
from .tiers import DeviceTier, HostTier, TierSpec


def _levels(config, fmt, new_rows, life, n_tables=1):
    """The table's levels, top first, holding rows in the stored form ``fmt``; ``life``: the table's ``KeyLife``;
    ``n_tables``: in a store of several, the home keeps each row's table, and the caches sum the tables' rows."""
    owners = n_tables > 1
    o = config.options
    chunk_rows = o.chunk_rows if o.placement == "ssd" else 1  # only the SSD tier moves chunks
    spec = TierSpec(fmt.width, str(fmt.dtype), o.slab_rows, chunk_rows)

    def cache(tier_type, rows, below, what):
        tier = tier_type(dataclasses.replace(spec, slab_rows=min(o.slab_rows, rows), chunk_rows=1))
        return CacheLevel(tier, rows, o.policy, below, what, n_tables)

    if o.placement == "device":  # the home is the top level: its pins, if unbounded, only where keys may go
        return [HomeLevel(DeviceTier(spec), new_rows, life, o.max_rows, o.policy, pins=config.evict is not None,
                          owners=owners)]
    tier = HostTier(spec) if o.placement == "host" else SsdTier(o.ssd_path, spec, o.ssd_threads)
    home = HomeLevel(tier, new_rows, life, owners=owners)
    levels = [home]
    if o.host_cache_rows:
        levels.insert(0, cache(HostTier, o.host_cache_rows, home, "host_cache_rows"))
    levels.insert(0, cache(DeviceTier, o.cache_rows, levels[0], "cache_rows"))
    return levels


class EmbeddingTable:
    """One embedding table of ``config`` (a ``TableConfig``); see the module docstring.

    ``n_tables`` > 1 makes it the store of that many tables of one row format (``batched.py``): its keys are theirs
    mixed with their index (``mixing.py``), each call's ``tags`` say which table each key is of, and the home keeps
    each row's table.

    Its state has one owner per concern: the rows, the levels (``levels``, top first); the batches whose rows are
    pinned, from prefetch or lookup to update or release, ``in_flight`` (batch.py); the keys' clock, ticks, admission
    and drops, ``life`` (keylife.py). Both change only under the table's lock, which orders their device work too
    (ordered.py): the step's thread and the pipeline's prefetch worker reach them. A subclass changes what a new key's
    weights are (``initial``) and how a batch's update is applied (``apply_update``), nothing else."""

    def __init__(self, config, n_tables=1):
        self.config, self.n_tables = config, n_tables
        self.dim, self.rule, self.lr = config.dim, config.rule, config.lr
        self.format = RowFormat(config.rule, config.dim, config.dtype, config.rounding,  # float16: row_format.py
                                config.initializer.seed)
        self.life = KeyLife(config.name, config.ticks, config.admit_after or 1, config.evict_every)
        self.levels = _levels(config, self.format, self._new_rows, self.life, n_tables)
        self.top, self.home = self.levels[0], self.levels[-1]
        self.in_flight = InFlight(config.name, self.top)
        self._lock = OrderedLock()  # held while a level's rows or bookkeeping change; orders their device work
        self._dirty = []  # (keys, their tags or None) updated since clear_dirty()
        self._closed = set()  # in a store of several tables, those closed (close(table))

    admission = property(lambda self: self.life.admission)

    def initial(self, keys):
        """The initial weights ``[n, dim]`` of new ``keys`` (the table's own keys), by the config's initializer."""
        return initial_weights(self.config.initializer, keys, self.dim, self.config.dtype)

    def _new_rows(self, keys, tags=None):
        """A store of several tables draws a key's row from the table's own key, as the table alone would."""
        w = self.initial(keys if tags is None else unmixed(keys, tags))
        return self.format.new_rows(w), backend.get_array_module(w).zeros(keys.shape[0], np.int32)

    def __len__(self):
        return len(self.home)

    def room(self):
        """How many more rows the device level could pin beside those pinned now; None where it is unbounded. A
        training loop reads it while the current batch's rows are pinned, for a :meth:`prefetch` that must fit
        beside them whenever it runs. It counts pins on the host (``InFlight.pinned``), so the step that asks
        does not wait for the device; a row pinned twice counts twice, as does a device batch's padding (it counts N,
        its keys, not U, which stays on the device), which only errs towards skipping."""
        with self._lock:
            self.in_flight.settle()
            bound = self.top.bound
            return None if bound is None else bound - self.in_flight.pinned

    def prefetch(self, keys, room=None, tags=None, copy=True):
        """Bring the rows of an upcoming batch's ``keys`` into the device rows and pin them until that batch's
        update (the next ``lookup`` takes over the pins of the oldest prefetch, and when it is given the same
        keys, its unique keys and slots as well). A training loop may call it from another thread while the
        current batch computes. ``room`` (from :meth:`room`): do nothing, and return False, where the unique keys
        are more than that (rather than raise StoreFullError).

        A table that admits keys reads an ssd home's chunks ahead but pins nothing, and returns False: admitting
        counts a batch's keys and inserts some, which must happen in batch order, after the previous batch's update
        and the evictions it triggers; done here, on the worker thread, it would depend on which ran first, and a
        resumed run would not equal an unbroken one. ``tags``: as ``lookup`` takes them. ``copy=False``: the keys
        are the caller's own and will not change before the lookup (a collection's, whose lookup passes the same
        array, so the lookup knows it without comparing them)."""
        keys = backend.to_device(integer_keys(keys, f"{self.config.name}.prefetch"), np.int64)
        if copy or not backend.is_device_array(keys):  # the caller's may change before the lookup
            keys = backend.xp.array(keys)
        tags = None if tags is None else backend.to_device(tags, np.int32)
        unique, inverse, valid, tags = self._unique(keys, tags)
        # A fixed-size unique's count stays on the device, so room is weighed against its size N, the keys, which
        # bounds it: a prefetch may be skipped that would have fit, never one that would not (and acquire's own
        # StoreFullError stays the last word).
        if room is not None and unique.shape[0] > room:
            return False
        if hasattr(self.home.tier, "read_ahead"):  # the disk works while the lock is free for the step's update
            with self._lock:
                cold = self._cold_slots(unique)
            self.home.tier.read_ahead(cold)
        if self.admission is not None:
            return False
        with self._lock:
            self.in_flight.settle()
            self.in_flight.pin(keys, unique, inverse, tags, valid, "prefetched")
        return True

    def _cold_slots(self, keys):
        """The home's slots of those of ``keys`` that no cache holds: the rows a prefetch will read from there."""
        for level in self.levels[:-1]:
            keys = level.here(keys)
            keys = keys[level.locate(keys) < 0]
        slots = self.home.locate(self.home.here(keys))
        return slots[slots >= 0]

    def lookup(self, keys, offsets=None, mode=None, insert=True, weights=None, tags=None):
        """Rows of ``keys [N]`` (int64): ``[N, D]``, or with CSR ``offsets [B+1]`` pooled per bag by ``mode``
        ("sum", "mean" or "max"), ``[B, D]``. Differentiable: its backward updates the rows in place.
        ``weights [N]`` (mode "sum" only) make a weighted sum; they are data, so no gradient reaches them.

        ``insert=False`` is the evaluation read (an ``EmbeddingCollection`` in eval mode): absent keys read as
        their initial weights and are not added, so evaluating neither grows the table nor, under ``max_rows``,
        evicts trained rows; it has no backward and leaves prefetched pins alone.

        ``tags [N]`` (int32, on the keys' device), in a store of several tables: the table each key is of, its
        keys mixed with that index (``mixing.feature_keys``).
        """
        keys = integer_keys(keys, f"{self.config.name}.lookup")
        _check_pooling(self.config.name, keys, offsets, mode, weights)
        # On the device from here on: device keys stay there (nothing below reads them back), host keys go up once.
        keys = backend.to_device(keys, np.int64)
        offsets = None if offsets is None else backend.to_device(offsets, np.int64)
        weights = None if weights is None else backend.to_device(weights, self.format.compute_dtype)
        tags = self._checked_tags(tags, keys)
        if not insert:
            unique, inverse = unique_keys(keys)
            peeked = self._peek(unique, _unique_tags(tags, unique, inverse))
            return Tensor(embedding_bag(peeked, inverse, offsets, mode or "sum", weights))
        with self._lock:
            self.in_flight.settle()
            batch = self.in_flight.look_up(keys, lambda: self._sorted(keys, tags))
        rows = self.format.weights(self.top.tier.read(batch.slots))
        if self.admission is not None:  # the default row of the keys still pending, after the admitted ones
            rows = backend.xp.concatenate([rows, backend.xp.zeros((1, self.dim), rows.dtype)])
        if not is_grad_enabled():
            with self._lock:
                self.in_flight.unpin(batch, "released")
            return Tensor(embedding_bag(rows, batch.inverse, offsets, mode or "sum", weights))
        # Every position among the unique keys is some key's (none where pending keys share a default row), but
        # a fixed-size unique's padding, whose runs are empty: zero gradients, written to slot -1 (no key's row).
        n_slots = batch.unique.shape[0] if self.admission is None else None
        fn = EmbeddingBagFunction(batch.inverse, offsets, mode or "sum", lambda u, g: self._backward(batch, u, g),
                                  weights, n_slots)
        out = fn.apply(Tensor(rows, requires_grad=True))
        watch(fn, batch, self)  # release(out), or the collector once out is garbage, gives the pins back (batch.py)
        return out

    def _sorted(self, keys, tags):
        """``(unique, inverse, their tags, valid)`` of a training lookup's ``keys``, counted by admission."""
        unique, inverse, valid, tags = self._unique(keys, tags)
        if self.admission is not None:
            unique, inverse = self.life.admit(unique, inverse)
        return unique, inverse, tags, valid

    def _unique(self, keys, tags):
        """``(unique, inverse, valid, their tags)`` of a training batch's device ``keys``. A device table's step
        reads nothing back: its unique is of fixed size (``unique_keys_fixed``; ``valid`` marks the U distinct
        keys). Exact (``valid`` None) on the host, where counting costs no read, and where the step reads anyway:
        admission compacts the admitted keys, an ssd home reads its cold slots ahead, and a bounded top level (a
        cache, or ``max_rows``) weighs a prefetch and its evictions by U: by N, a batch of multi-hot features (N
        many times U) would skip every prefetch of a cache smaller than N and evict rows it did not need to."""
        if (not backend.is_device_array(keys) or self.admission is not None or self.top.bound is not None
                or hasattr(self.home.tier, "read_ahead")):
            unique, inverse = unique_keys(keys)
            return unique, inverse, None, _unique_tags(tags, unique, inverse)
        unique, inverse, _, valid, source = unique_keys_fixed(keys)
        return unique, inverse, valid, None if tags is None else tags[source]

    def _checked_tags(self, tags, keys):
        """``tags`` on the device, checked: shapes always, values where they come from the host (a device's would be
        read back; the collection makes them in range)."""
        if tags is None:
            return None
        name = self.config.name
        if self.n_tables == 1:
            raise ValueError(f"{name}.lookup: this store holds one table: give no tags, or build it with n_tables")
        if np.shape(tags) != np.shape(keys):
            raise ValueError(f"{name}.lookup: {np.shape(keys)[0]} keys and {np.shape(tags)[0]} tags; give one tag "
                             "(the table's index in the store) a key")
        if not backend.is_device_array(tags) and tags.size:
            lo, hi = int(np.min(tags)), int(np.max(tags))
            if lo < 0 or hi >= self.n_tables:
                raise ValueError(f"{name}.lookup: tags span [{lo}, {hi}]; this store holds tables 0 to "
                                 f"{self.n_tables - 1}: give each key its table's index")
        return backend.to_device(tags, np.int32)

    def settle_releases(self):
        """Give back the pins of the lookups let go since the table's last lock (``release``)."""
        with self._lock:
            self.in_flight.settle()

    def _peek(self, unique, tags=None):
        """The weights of ``unique`` keys (of tables ``tags``) without inserting any: an evaluation must not grow
        the table (nor, under ``max_rows``, evict trained rows for keys it merely saw); an absent key reads as its
        initial weights."""
        present = to_host(self.home.locate(self.home.here(unique)) >= 0)  # an evaluation may read back
        weights = backend.xp.empty((unique.size, self.dim), self.format.compute_dtype)
        if present.any():
            at = backend.to_device(np.flatnonzero(present))
            with self._lock:  # pinned only while read (the level's take), so no batch's
                weights[at] = self.format.weights(self.top.take(unique[at])[0])
        if not present.all():  # a pending key reads the default row, as in training
            at = backend.to_device(np.flatnonzero(~present))
            keys = unique[at] if tags is None else unmixed(unique[at], tags[at])
            weights[at] = 0 if self.admission is not None else self.initial(keys)
        return weights

    def _backward(self, batch, positions, grads):
        """``batch``'s backward: the summed ``grads`` of its unique keys at ``positions``, applied now or, while a
        loss scaler holds the step's updates, at ``release_updates``."""
        if self.admission is not None:
            positions, grads = self.admission.rows_only(batch.unique.shape[0], positions, grads)
        if self.in_flight.backward(batch, positions, grads):
            self.apply_update(batch, positions, grads)

    def apply_update(self, batch, positions, grads, adjust=None):
        """Update ``batch``'s rows at ``positions`` among its unique keys with ``grads`` by the table's rule, and
        give its pins back. ``adjust(rows)``: changes the working rows in place before the rule runs (a column
        shard's accumulator, distributed/column.py). A subclass whose update needs more than this batch's gradients
        overrides it."""
        with self._lock:  # a prefetch on another thread may be moving rows of this level
            self.in_flight.settle()
            self._update_rows(batch, positions, grads, adjust)

    def working_rows(self, batch, positions):
        """The working rows (float32 where stored as float16) of ``batch``'s unique keys at ``positions``."""
        with self._lock:
            return self.format.unpack(self.top.tier.read(batch.slots[positions]))

    def _update_rows(self, batch, positions, grads, adjust=None):
        """Everything here stays on the top level's device: positions, slots, rows, steps and a cache's dirty flags."""
        keys, tags, s = batch.unique, batch.tags, batch.slots[positions]
        rows, steps = self.top.read(s)
        rows = self.format.unpack(rows)  # float16 weights: updated in float32, rounded back
        if adjust is not None:
            adjust(rows)
        xp = backend.get_array_module(rows)
        update_rows(rows, steps, xp.arange(s.shape[0]), grads, self.rule, self.lr)
        ids = None
        if self.format.stochastic:  # rounds by the row's own key, as the table alone would
            ids = keys[positions] if tags is None else unmixed(keys[positions], tags[positions])
        self.top.write(s, self.format.pack(rows, ids, steps), steps)
        self.top.changed(s)
        # A fixed-size unique's padding repeats the largest key with its tag: a dirty key twice, one once read.
        self._dirty.append((keys[positions], None if tags is None else tags[positions]))
        self.in_flight.unpin(batch, "updated")
        home, at = self.home, None  # the update's tick stamps its rows at the home, where it keeps ticks
        if home.touched is not None:
            at = s if home is self.top else home.locate(home.here(keys[positions]))
        if self.life.tick(at):
            self._evict(self.config.evict)

    # -- the lifecycle of keys: eviction, deletion, deltas ------------------------------------------------------
    def evict(self, rule=None):
        """Drop the keys that meet ``rule`` (an ``EvictionRule``; default: the config's ``evict``) from every level
        and the index, their slots going back to the allocators; keys pinned by batches in flight are left for a
        later evict. With ``ttl_steps``, also the pending keys not counted within it. Returns how many keys with
        rows were dropped."""
        rule = rule or self.config.evict
        if rule is None:
            raise ValueError(f"{self.config.name}.evict: no rule; pass an EvictionRule or give the table's config "
                             "one (TableConfig(evict=...))")
        with self._lock:
            return self._evict(rule)

    def _evict(self, rule):
        self.life.expire(rule.ttl_steps)
        return self._drop(expired(self, rule))

    def delete(self, keys):
        """Drop ``keys`` as ``evict`` drops keys (absent ones are ignored; pinned ones are kept), and their pending
        admission counts; returns how many rows were dropped."""
        keys = backend.unique(np.asarray(to_host(integer_keys(keys, f"{self.config.name}.delete")), np.int64).ravel())
        with self._lock:
            self.life.forget(keys)
            return self._drop(keys)

    def marker(self):
        """An opaque marker of now, the table's update clock: ``delta(since=marker)`` gives what changes after."""
        return self.life.clock

    def delta(self, since):
        """``(keys, rows, steps, deleted)``: NumPy arrays of the keys inserted or updated after marker ``since``
        with their full rows and steps, and the keys dropped after it that the table does not hold again
        (``delta.py``); needs ``TableConfig(track_updates=True)``. Forgets the drops up to ``since``: a later delta
        must be since ``since`` or a later marker."""
        return changes_since(self, since)

    def _drop(self, keys):
        home = self.home
        keys = unpinned(self, keys)
        keys = keys[to_host(home.locate(home.here(keys)) >= 0)]
        if keys.size:
            for level in self.levels:
                level.drop(keys)
            self.life.log_drops(keys)
        return int(keys.size)

    def hold_updates(self):
        """Keep the row updates of the coming backwards, rows pinned, until ``release_updates``; returns the list of
        their batches (``BatchRows``), whose ``grads`` a loss scaler unscales and checks in place. A store of several
        tables holds once for them all: while it holds, a second call returns an empty list."""
        return self.in_flight.hold()

    def release_updates(self, apply=True):
        """Apply the held updates, or for a skipped step drop them, unpinning their rows either way."""
        for batch in self.in_flight.take_held():
            if apply:
                self.apply_update(batch, batch.positions, batch.grads)
            else:
                with self._lock:
                    self.in_flight.unpin(batch, "released")

    # -- the interface of snapshots ------------------------------------------------------------------------------
    def dirty_keys(self, table=None):
        """The keys updated since the last ``clear_dirty()``, sorted, each once; in a store of several tables,
        those of ``table`` (its index), as that table's own keys."""
        keys, tags = self._dirty_pairs()
        if table is not None:
            keys = unmixed(keys[tags == table], table)
        return backend.unique(keys)

    def _dirty_pairs(self):
        """The dirty keys and their tags (zeros in a store of one table) as two NumPy arrays, merged into one entry."""
        pairs = [(to_host(k), np.zeros(k.shape[0], np.int32) if t is None else to_host(t)) for k, t in self._dirty]
        keys, tags = (np.concatenate([p[i] for p in pairs]) if pairs else np.zeros(0, dt)
                      for i, dt in ((0, np.int64), (1, np.int32)))
        self._dirty = [(keys, tags)] if keys.size else []
        return keys, tags

    def clear_dirty(self, table=None):
        """Forget the dirty keys, all or (in a store of several tables) those of ``table``."""
        if table is None:
            self._dirty = []
        else:
            keys, tags = self._dirty_pairs()
            self._dirty = [(keys[tags != table], tags[tags != table])] if keys.size else []
        self.life.clear_dropped()

    def export(self, keys=None, chunk=1 << 16, table=None):
        """``(keys [n], rows [n, width], steps [n])`` NumPy chunks of every row, or of ``keys`` that are present
        (e.g. ``dirty_keys()``); writes the caches' dirty rows home first. ``table``: in a store of several tables,
        only the rows of that one (its index), keys still as the store holds them."""
        self.top.flush()
        if keys is None:
            pairs = (pair for pair in self.home.index.items(chunk))
        else:
            keys = np.asarray(integer_keys(keys, f"{self.config.name}.export"), np.int64)
            pairs = ((keys[i:i + chunk], self.home.locate(keys[i:i + chunk])) for i in range(0, keys.size, chunk))
        for k, s in pairs:
            k, s = self._of_table(to_host(k), to_host(s), table)
            if k.size:
                rows, steps = self.home.read(self.home.here(s))
                yield k, to_host(rows), to_host(steps).copy()

    def _of_table(self, keys, slots, table):
        """The present ``keys`` and their home ``slots`` (NumPy), only those of ``table`` when it is given."""
        held = slots >= 0
        if table is not None:
            held &= to_host(self.home.owners[self.home.here(np.where(held, slots, 0))]) == table
        return keys[held], slots[held]

    def keys(self, chunk=1 << 16, table=None):
        """Every key, in chunks; ``table``: only that table's, in a store of several (as the store holds them)."""
        for k, s in self.home.index.items(chunk):
            yield self._of_table(to_host(k), to_host(s), table)[0]

    def count(self, table):
        """How many keys the table ``table`` (its index) has in this store of several."""
        return sum(int(k.size) for k in self.keys(table=table))

    def import_rows(self, keys, rows, steps, tags=None):
        """Set the full rows ``[n, width]`` and update counts ``[n]`` of ``keys`` (inserting absent ones; of
        tables ``tags`` in a store of several)."""
        keys = np.asarray(to_host(integer_keys(keys, f"{self.config.name}.import_rows")), np.int64)
        for level in self.levels[:-1]:
            level.drop(keys)  # the cached copies are older than what is imported
        home = self.home
        home.put(keys, home.here(rows), home.here(np.asarray(to_host(steps), np.int32)), tags)
        self.life.stamp(home.locate(home.here(keys)))  # a change for deltas, as an update is

    def stats(self):
        """Rows, bytes and per-level traffic (an ssd level's also in chunks, with the seconds callers waited for the
        disk); ``overhead_bytes_per_key`` counts everything but the rows, over the
        table's keys, and each level's its own bookkeeping (index, allocator, per-slot arrays) over its rows;
        ``weight_bytes_per_row`` is the stored weights of a row (half of ``4·dim`` for a float16 table)."""
        home, spec = self.home, self.home.tier.spec
        n = max(len(home), 1)
        out = {"keys": len(home), "row_bytes": spec.row_bytes, "weight_bytes_per_row": self.format.weight_bytes,
               "index_bytes": home.index.nbytes, "allocator_bytes": home.alloc.overhead_bytes,
               "index_allocator_bytes_per_key": (home.index.nbytes + home.alloc.overhead_bytes) / n,
               "overhead_bytes_per_key": sum(level.overhead_bytes for level in self.levels) / n, "levels": []}
        for level in self.levels:
            seen, rows = level.hits + level.misses, len(level)
            out["levels"].append({
                "tier": type(level.tier).__name__, "rows": rows, "bound": level.bound,
                "overhead_bytes": level.overhead_bytes, "overhead_bytes_per_key": level.overhead_bytes / max(rows, 1),
                "bytes": level.tier.nbytes, "hit_rate": level.hits / seen if seen else None, "hits": level.hits,
                "misses": level.misses, "evictions": level.evictions, "bytes_read": level.tier.bytes_read,
                "bytes_written": level.tier.bytes_written,
                **{k: getattr(level.tier, k) for k in ("chunks_read", "chunks_written", "io_seconds")
                   if hasattr(level.tier, k)}})
        return out

    def close(self, table=None):
        """Close the tiers (an ssd home's file stays on disk); in a store of several tables, ``table`` (its index)
        is done with them, and the tiers close once every table is."""
        if table is not None:
            self._closed.add(table)
            if len(self._closed) < self.n_tables:
                return
        for level in self.levels:
            level.tier.close()


def _unique_tags(tags, unique, inverse):
    """The tag of each of the batch's ``unique`` keys from the ``tags`` of its keys (None stays None): a key's
    tags are all one table's, so the scatter's order does not matter."""
    if tags is None:
        return None
    out = backend.get_array_module(tags).empty(unique.shape[0], np.int32)
    out[inverse] = tags
    return out


def _check_pooling(name, keys, offsets, mode, weights):
    """One line naming table ``name`` for a lookup's pooling arguments that embedding_bag would refuse."""
    if (offsets is None) != (mode is None) or mode not in (None, *MODES):
        raise ValueError(f"{name}.lookup: pooling needs both offsets [B+1] and mode (one of {', '.join(MODES)}); "
                         f"got offsets={'None' if offsets is None else 'given'} and mode={mode!r}")
    if weights is not None and mode != "sum":
        raise ValueError(f"{name}.lookup: per-sample weights make a weighted sum, so they need offsets and "
                         f"mode='sum'; got mode={mode!r}")
    if weights is not None and np.shape(weights) != np.shape(keys):
        raise ValueError(f"{name}.lookup: weights of shape {np.shape(weights)} for keys of shape {np.shape(keys)}; "
                         "give one weight per key")
