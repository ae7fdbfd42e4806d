"""A bundle's table at inference: the rows of known keys from ``tables.h5``, absent keys as their initial weights.

The keys are stored sorted, so the key -> row index is the key array itself (a binary search), held in memory.
The rows are loaded whole, or, with ``host_cache_rows``, read from the file on demand through a bounded LRU of
decoded rows, for a table that fits on disk but not in memory.

A delta (``applied``) gives a new table and leaves this one as it was, so a server swaps it in whole. The rows it
sets are held in memory (``parts``), in the bundle's row format; a table read from the file (``parts`` None until
a delta) then reads each key where its row is now: ``where[i] >= 0`` is row ``where[i]`` of the file,
``-1 - where[i]`` a held row. The file is never
written (its SHA-256 is the manifest's), so the LRU of file rows stays valid. The held rows of a table read from
disk only grow with the keys the deltas change: export the bundle again now and then to have them on disk.
"""
import copy

import numpy as np

from .initial import initial_weights
from .lru import RowCache
from .rows import datasets, decode, encode


class BundleTable:
    """Table ``name`` of the open ``tables.h5`` ``file``, described by its manifest entry ``meta`` ({dim, dtype,
    initializer}) and stored as ``rows``; ``host_cache_rows``: None loads every row, n keeps at most n."""

    def __init__(self, file, name, meta, rows, host_cache_rows=None):
        self.name, self.meta, self.rows = name, meta, rows
        self.dim = int(meta["dim"])
        self.group = file["tables"][name]
        self.keys = self.group["keys"][...]
        if host_cache_rows is None:  # every row held, key i's at i (where None)
            self.parts, self.where, self.cache = {d: self.group[d][...] for d in datasets(rows)}, None, None
        else:
            self.parts, self.where = None, np.arange(self.keys.size)
            self.cache = RowCache(host_cache_rows, self.dim)

    def __len__(self):
        return self.keys.size

    def lookup(self, keys):
        """``[n, D]`` float32 weights of ``keys [n]`` (int64)."""
        unique, inverse = np.unique(keys, return_inverse=True)
        pos = np.minimum(np.searchsorted(self.keys, unique), max(self.keys.size - 1, 0))
        present = self.keys[pos] == unique if self.keys.size else np.zeros(unique.size, bool)
        out = np.empty((unique.size, self.dim), np.float32)
        out[present] = self._read(pos[present])
        absent = unique[~present]
        out[~present] = initial_weights(self.meta["initializer"], absent, self.dim, self.meta["dtype"])
        return out[inverse.reshape(-1)]

    def _read(self, positions):
        """The decoded rows of the keys at ``positions`` (increasing, each once)."""
        if self.where is None:
            return decode({d: a[positions] for d, a in self.parts.items()}, self.rows)
        at = self.where[positions]
        held = at < 0
        rows = np.empty((positions.size, self.dim), np.float32)
        if held.any():
            rows[held] = decode({d: a[-1 - at[held]] for d, a in self.parts.items()}, self.rows)
        rows[~held] = self._read_file(at[~held])  # increasing still: the file's keys are sorted as these are
        return rows

    def _read_file(self, positions):
        rows, hit = self.cache.get(positions)
        miss = positions[~hit]
        if miss.size:  # h5py reads a list of increasing indices in one call
            rows[~hit] = decode({d: self.group[d][miss] for d in datasets(self.rows)}, self.rows)
            self.cache.put(miss, rows[~hit])
        return rows

    def applied(self, keys, weights, deleted):
        """A new table: this one with ``deleted`` keys dropped and the rows of ``keys [n]`` set to ``weights [n, D]``
        (float32, stored in the bundle's row format: int8 rows quantized each on its own range, as an export
        does). This table is left as it was."""
        kept = ~(np.isin(self.keys, deleted) | np.isin(self.keys, keys))
        new = encode(weights, self.rows)
        order = np.argsort(np.concatenate([self.keys[kept], keys]), kind="stable")
        out = copy.copy(self)
        out.keys = np.concatenate([self.keys[kept], keys])[order]
        if self.where is None:
            out.parts = {d: np.concatenate([a[kept], new[d]])[order] for d, a in self.parts.items()}
            return out
        at = self.where[kept]
        held = at < 0  # the held rows still read are kept, renumbered in order; those of dropped keys go
        before = {d: a[-1 - at[held]] for d, a in (self.parts or new).items()}
        at[held] = -1 - np.arange(int(held.sum()))
        out.parts = {d: np.concatenate([before[d], new[d]]) for d in new}
        out.where = np.concatenate([at, -1 - (int(held.sum()) + np.arange(keys.size))])[order]
        return out
