"""Table-batched embeddings: the tables of a collection that share a row format are one physical store.

FBGEMM's TBE, OneEmbedding and HugeCTR look up every table of a collection in one kernel, because on a GPU the
host pays for every launch: a step written table by table costs launches, CuPy calls and reads of device values
that grow with the number of tables, however fast each kernel is. Here the tables whose configs differ only in
their names (same dim, dtype, rule, lr, initializer and placement) share one ``EmbeddingTable`` of
``n_tables`` tables: one key index over (table, key), one chain of levels, one unique over the whole batch, one
gather-and-pool and one fused backward-and-update for all of them. The store's keys are each table's mixed with
the table's index (``mixing.py``), and its home keeps each row's table, so each table still has its own keys, rows,
name, config, dirty keys, stats and snapshot (``BatchedTable``).

What a table shares with the others of its store: its rows' levels, and so a device or host cache (sized as the
sum of theirs, one cache for all), the update clock and its lock. A table that keeps per-key state of its own
(``max_rows``, admission, eviction rules, update ticks for deltas) or its own file (an ssd home) keeps a store of
its own: ``batch_key`` says which.

Each table trains bit for bit as it would alone: its initial rows are drawn from its own keys, a key's gradient
is summed over the same occurrences in the same order, and each row's update is the row's own.
"""
import dataclasses
import json

import numpy as np

from gpuemb.autograd import backend
from gpuemb.key_types import integer_keys

from .mixing import feature_keys, unmixed
from .table import EmbeddingTable


def batch_key(config):
    """What tables must share to be one store (their configs but the name), or None for a table that keeps a
    store of its own."""
    o = config.options
    if o.max_rows is not None or (config.admit_after or 1) > 1 or config.evict is not None or config.ticks \
            or o.placement == "ssd":
        return None
    d = config.to_dict()
    d.pop("name")
    return json.dumps(d, sort_keys=True, default=str)


def batch_tables(configs, batched=True):
    """``(stores, tables)``: the physical stores of ``configs`` (one per group of batchable configs, and one per
    other config) and, per config, in order, its table: a ``BatchedTable`` of a store of several, or the store
    itself. ``batched=False``: a store per config."""
    groups = {}
    for i, c in enumerate(configs):
        key = batch_key(c) if batched else None
        groups.setdefault(key if key is not None else ("alone", i), []).append(i)
    stores, tables = [], [None] * len(configs)
    for members in groups.values():
        if len(members) == 1:
            stores.append(EmbeddingTable(configs[members[0]]))
            tables[members[0]] = stores[-1]
            continue
        store = EmbeddingTable(store_config([configs[i] for i in members]), n_tables=len(members))
        stores.append(store)
        for tag, i in enumerate(members):
            tables[i] = BatchedTable(store, tag, configs[i])
    return stores, tables


def store_config(configs):
    """The config of the store of ``configs`` (which differ only in name): its caches are the sum of theirs."""
    first, o = configs[0], configs[0].options
    n = len(configs)
    options = dataclasses.replace(o, cache_rows=o.cache_rows * n, host_cache_rows=o.host_cache_rows * n)
    return dataclasses.replace(first, name=f"{first.name}..{configs[-1].name} ({n} tables)", options=options)


class BatchedTable:
    """Table ``tag`` of ``store`` (an ``EmbeddingTable`` of several), with ``config`` its own: the
    ``EmbeddingTable`` interface, each call on the store with this table's keys mixed in and taken back out."""

    def __init__(self, store, tag, config):
        self.store, self.tag, self.config = store, tag, config
        self.dim, self.rule, self.lr, self.format = config.dim, config.rule, config.lr, store.format

    # What the store holds for all its tables.
    levels = property(lambda self: self.store.levels)
    top = property(lambda self: self.store.top)
    home = property(lambda self: self.store.home)
    admission = property(lambda self: None)
    life = property(lambda self: self.store.life)  # the store's clock, and drops; no ticks, no admission
    in_flight = property(lambda self: self.store.in_flight)

    def mixed(self, keys, method):
        """This table's ``keys`` as the store holds them, and their tags, on the keys' device; ``method`` names the
        caller in errors."""
        keys = integer_keys(keys, f"{self.config.name}.{method}")
        keys = backend.to_device(keys, np.int64) if backend.is_device_array(keys) else np.asarray(keys, np.int64)
        xp = backend.get_array_module(keys)
        return feature_keys(keys, self.tag), xp.full(keys.shape, self.tag, np.int32)

    def __len__(self):
        return self.store.count(self.tag)

    def lookup(self, keys, offsets=None, mode=None, insert=True, weights=None):
        """As ``EmbeddingTable.lookup``, on this table's keys."""
        keys, tags = self.mixed(keys, "lookup")
        return self.store.lookup(keys, offsets, mode, insert, weights, tags)

    def room(self):
        return self.store.room()

    def prefetch(self, keys, room=None):
        keys, tags = self.mixed(keys, "prefetch")
        return self.store.prefetch(keys, room, tags)

    def export(self, keys=None, chunk=1 << 16):
        mine = None if keys is None else self.mixed(keys, "export")[0]
        for k, rows, steps in self.store.export(mine, chunk, self.tag):
            yield unmixed(k, self.tag), rows, steps

    def keys(self, chunk=1 << 16):
        for k in self.store.keys(chunk, self.tag):
            yield unmixed(k, self.tag)

    def import_rows(self, keys, rows, steps):
        keys, tags = self.mixed(backend.to_host(keys), "import_rows")
        self.store.import_rows(keys, rows, steps, tags)

    def dirty_keys(self):
        return self.store.dirty_keys(self.tag)

    def clear_dirty(self):
        self.store.clear_dirty(self.tag)

    def delete(self, keys):
        return self.store.delete(self.mixed(backend.to_host(keys), "delete")[0])

    def evict(self, rule=None):
        raise ValueError(f"{self.config.name}.evict: a table batched with others evicts nothing; give it an evict "
                         "rule in its config (TableConfig(evict=...)), which keeps it a store of its own")

    def marker(self):
        return self.store.marker()

    def delta(self, since):
        raise ValueError(f"{self.config.name}.delta: the table keeps no update ticks; build it with "
                         "TableConfig(track_updates=True)")

    def hold_updates(self):
        return self.store.hold_updates()

    def release_updates(self, apply=True):
        self.store.release_updates(apply)

    def stats(self):
        """The store's stats (its levels hold every table of it), with this table's own keys and the store's name."""
        out = self.store.stats()
        out.update(keys=len(self), store=self.store.config.name, store_keys=out["keys"])
        return out

    def close(self):
        """Close this table; the store's tiers close with the last of its tables, so closing one table of a
        collection leaves the others' rows in place."""
        self.store.close(self.tag)
