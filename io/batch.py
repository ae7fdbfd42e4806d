"""A batch of rows: the three arrays every reader, shard, generator and loader hands around."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Batch:
    """label float32 ``[N]`` (or ``[N, T]`` for T tasks), dense float32 ``[N, n_dense]``, sparse int64 ``[N, S]``."""
    label: np.ndarray
    dense: np.ndarray
    sparse: np.ndarray

    @property
    def rows(self):
        return self.label.shape[0]

    def arrays(self):
        return self.label, self.dense, self.sparse

    def slice(self, a, b):
        """Rows ``a:b`` as views."""
        return Batch(self.label[a:b], self.dense[a:b], self.sparse[a:b])

    def take(self, rows):
        """The rows at the indices ``rows``, copied."""
        return Batch(self.label[rows], self.dense[rows], self.sparse[rows])

    @staticmethod
    def concat(batches):
        """One batch holding the rows of ``batches`` in order."""
        return Batch(*(np.concatenate(parts) for parts in zip(*(b.arrays() for b in batches))))
