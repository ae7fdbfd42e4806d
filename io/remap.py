"""From raw token ids to the ids that are stored: the frequency threshold and the per-column caps.

- Threshold: a token seen fewer than ``threshold`` times in the training rows becomes its column's rare id
  (:func:`gpuemb.io.hashing.rare_id`). Counting needs a first pass over the training rows.
- Cap: ids of a capped column are taken modulo its cap, as MLPerf caps Criteo 1TB's tables at 40M rows, so the
  column's ids fall in ``[0, cap)``. Ids are already well mixed hashes, so the modulo spreads them evenly.

Both work per sparse feature, whatever holds its ids: a fixed feature's columns of ``batch.sparse`` or a jagged
feature's keys in ``batch.bags`` (:func:`feature_ids`), so a list column is thresholded and capped as a scalar
one is.
"""
import numpy as np

from gpuemb.io.bags import JAGGED
from gpuemb.io.hashing import rare_id


def feature_ids(batch, hotness):
    """``(feature, array, key)`` for each sparse feature of ``batch``: ``array[key]`` are its ids. A fixed
    feature's (``hotness[f] >= 1``) are its columns of ``batch.sparse``, a jagged one's the positions of its keys
    in ``batch.bags.values``, which hold the bags row after row."""
    if JAGGED in hotness:
        lengths = batch.bags.lengths
        owner = np.repeat(np.tile(np.arange(lengths.shape[1]), lengths.shape[0]), lengths.ravel())
    column, j = 0, 0
    for f, h in enumerate(hotness):
        if h == JAGGED:
            yield f, batch.bags.values, np.flatnonzero(owner == j)
            j += 1
        else:
            yield f, batch.sparse, (slice(None), slice(column, column + h))
            column += h


class TokenCounter:
    """Counts of each id per sparse column, merged lazily so that counting N ids costs O(N log N)."""

    def __init__(self, n_columns):
        self.keys = [np.empty(0, np.int64) for _ in range(n_columns)]
        self.counts = [np.empty(0, np.int64) for _ in range(n_columns)]
        self.pending = [[] for _ in range(n_columns)]

    def add(self, batch, hotness):
        """Count the ids of each sparse feature of ``batch`` (its ``hotness`` as in :func:`feature_ids`)."""
        for c, array, key in feature_ids(batch, hotness):
            self.pending[c].append(np.unique(array[key], return_counts=True))
            if sum(k.size for k, _ in self.pending[c]) > max(self.keys[c].size, 1 << 16):
                self._merge(c)

    def _merge(self, c):
        keys = np.concatenate([self.keys[c]] + [k for k, _ in self.pending[c]])
        counts = np.concatenate([self.counts[c]] + [n for _, n in self.pending[c]])
        self.keys[c], inverse = np.unique(keys, return_inverse=True)
        self.counts[c] = np.bincount(inverse, weights=counts).astype(np.int64)
        self.pending[c] = []

    def frequent(self, threshold):
        """Per column, the sorted ids seen at least ``threshold`` times."""
        for c in range(len(self.keys)):
            self._merge(c)
        return [k[n >= threshold] for k, n in zip(self.keys, self.counts)]


class IdRemap:
    """Applies the threshold (given the frequent ids per feature) and the caps to the ids of a batch."""

    def __init__(self, n_columns, frequent=None, caps=0):
        caps = (caps,) * n_columns if isinstance(caps, int) else tuple(caps)
        if len(caps) != n_columns or min(caps) < 0:
            raise ValueError(f"caps={caps}: give one cap >= 0 per sparse column ({n_columns}), or one for all; "
                             "0 means no cap")
        self.frequent, self.caps = frequent, np.array(caps, np.int64)

    def __call__(self, batch, hotness):
        """``batch``'s ids with rare ids replaced and caps applied, in place (``hotness`` as in
        :func:`feature_ids`)."""
        if self.frequent is None and not self.caps.any():
            return batch
        for c, array, key in feature_ids(batch, hotness):
            array[key] = self._remap(c, array[key])
        return batch

    def _remap(self, c, ids):
        if self.frequent is not None:
            keep = self.frequent[c]
            pos = np.minimum(np.searchsorted(keep, ids), max(keep.size - 1, 0))
            known = keep[pos] == ids if keep.size else np.zeros(ids.shape, bool)
            ids[~known] = rare_id(c)
        if self.caps[c]:
            ids %= self.caps[c]
        return ids
