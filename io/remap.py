"""From raw token ids to the ids that are stored: the frequency threshold and the per-column caps.

- Threshold: a token seen fewer than ``threshold`` times in the training rows becomes its column's rare id
  (:func:`gpuemb.io.hashing.rare_id`). Counting needs a first pass over the training rows.
- Cap: ids of a capped column are taken modulo its cap, as MLPerf caps Criteo 1TB's tables at 40M rows, so the
  column's ids fall in ``[0, cap)``. Ids are already well mixed hashes, so the modulo spreads them evenly.
"""
import numpy as np

from gpuemb.io.hashing import rare_id


class TokenCounter:
    """Counts of each id per sparse column, merged lazily so that counting N ids costs O(N log N)."""

    def __init__(self, n_columns):
        self.keys = [np.empty(0, np.int64) for _ in range(n_columns)]
        self.counts = [np.empty(0, np.int64) for _ in range(n_columns)]
        self.pending = [[] for _ in range(n_columns)]

    def add(self, sparse):
        """Count the ids of ``sparse`` ``[N, n_columns]``."""
        for c in range(sparse.shape[1]):
            self.pending[c].append(np.unique(sparse[:, c], return_counts=True))
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
    """Applies the threshold (given the frequent ids per column) and the caps to a sparse ``[N, S]`` array."""

    def __init__(self, n_columns, frequent=None, caps=0):
        caps = (caps,) * n_columns if isinstance(caps, int) else tuple(caps)
        if len(caps) != n_columns or min(caps) < 0:
            raise ValueError(f"caps={caps}: give one cap >= 0 per sparse column ({n_columns}), or one for all; "
                             "0 means no cap")
        self.frequent, self.caps = frequent, np.array(caps, np.int64)

    def __call__(self, sparse):
        """``sparse`` with rare ids replaced and caps applied, in place."""
        if self.frequent is not None:
            for c, keep in enumerate(self.frequent):
                col = sparse[:, c]
                pos = np.minimum(np.searchsorted(keep, col), max(keep.size - 1, 0))
                known = keep[pos] == col if keep.size else np.zeros(col.shape, bool)
                col[~known] = rare_id(c)
        capped = np.flatnonzero(self.caps)
        if capped.size:
            sparse[:, capped] %= self.caps[capped]
        return sparse
