"""A bundle's table at inference: the rows of known keys from ``tables.h5``, absent keys as their initial weights.

The keys are stored sorted, so the key -> row index is the key array itself (a binary search), held in memory.
The rows are loaded whole, or, with ``host_cache_rows``, read from the file on demand through a bounded LRU of
decoded rows, for a table that fits on disk but not in memory.
"""
import numpy as np

from .initial import initial_weights
from .lru import RowCache
from .rows import datasets, decode


class BundleTable:
    """Table ``name`` of the open ``tables.h5`` ``file``, described by its manifest entry ``meta`` ({dim, dtype,
    initializer}) and stored as ``rows``; ``host_cache_rows``: None loads every row, n keeps at most n."""

    def __init__(self, file, name, meta, rows, host_cache_rows=None):
        self.name, self.meta, self.rows = name, meta, rows
        self.dim = int(meta["dim"])
        self.group = file["tables"][name]
        self.keys = self.group["keys"][...]
        if host_cache_rows is None:
            self.parts, self.cache = {d: self.group[d][...] for d in datasets(rows)}, None
        else:
            self.parts, self.cache = None, RowCache(host_cache_rows, self.dim)

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
        """The decoded rows at ``positions`` (increasing, each once)."""
        if self.cache is None:
            return decode({d: a[positions] for d, a in self.parts.items()}, self.rows)
        rows, hit = self.cache.get(positions)
        miss = positions[~hit]
        if miss.size:  # h5py reads a list of increasing indices in one call
            rows[~hit] = decode({d: self.group[d][miss] for d in datasets(self.rows)}, self.rows)
            self.cache.put(miss, rows[~hit])
        return rows
