"""Variable-length bags of a batch's rows, row-major: what shards store and the loader shuffles.

Rows, not features, are what a loader permutes, splits between ranks and resumes at, so on the data path the bags
of a row sit together: ``lengths [N, J]`` int32 (keys per row and jagged feature) and ``values [M]`` int64, row 0's
bags first (its feature 0's keys, then its feature 1's, ...), then row 1's. The model takes the feature-major
:class:`~gpuemb.io.jagged.JaggedFeatures` that :func:`jagged_features` makes of a batch, in one gather.

A feature of fixed hotness (``h`` keys in every row, MLPerf's multi-hot Criteo) stays in the batch's ``sparse``
matrix, ``h`` columns side by side; hotness 0 marks a jagged feature, whose bags are here.
"""
from dataclasses import dataclass

import numpy as np

from .errors import DataError

JAGGED = 0  # the hotness that marks a feature of variable length in a ShardLayout and a Schema


@dataclass(frozen=True, eq=False)
class Bags:
    """J jagged features of N rows, row-major: ``lengths [N, J]`` int32, ``values [M]`` int64, M = lengths.sum()."""
    lengths: np.ndarray
    values: np.ndarray

    def __post_init__(self):
        if self.lengths.ndim != 2 or self.values.ndim != 1:
            raise DataError(f"Bags: lengths of shape {self.lengths.shape} and values of shape {self.values.shape}; "
                            "give lengths [N, J] and values [M]")

    @property
    def rows(self):
        return self.lengths.shape[0]

    def row_ends(self):
        """``[N + 1]`` int64: row r's keys are ``values[ends[r]:ends[r + 1]]``."""
        ends = np.zeros(self.rows + 1, np.int64)
        np.cumsum(self.lengths.sum(axis=1, dtype=np.int64), out=ends[1:])
        return ends

    def slice(self, a, b):
        """Rows ``a:b``, as views."""
        ends = self.row_ends()
        return Bags(self.lengths[a:b], self.values[ends[a]:ends[b]])

    def take(self, rows):
        """The rows at the indices (or mask) ``rows``, copied, in that order."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, np.int64)
        ends = self.row_ends()
        sizes = ends[rows + 1] - ends[rows]
        return Bags(self.lengths[rows], self.values[concat_ranges(ends[rows], sizes)])

    @staticmethod
    def concat(parts):
        return Bags(np.concatenate([p.lengths for p in parts]), np.concatenate([p.values for p in parts]))

    @staticmethod
    def empty(rows, n_jagged):
        return Bags(np.zeros((rows, n_jagged), np.int32), np.zeros(0, np.int64))


def concat_ranges(starts, sizes):
    """The concatenation of ``arange(s, s + n)`` over ``starts`` and ``sizes``, without a Python loop."""
    total = int(sizes.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(sizes)
    return np.repeat(starts - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)


def feature_major(hotness, sparse, bags):
    """``(values [M], lengths [F, N])`` of every feature, feature after feature, bag after bag: fixed features
    (``hotness[f] >= 1``) from their columns of ``sparse [N, S]``, jagged ones (``hotness[f] == 0``) from
    ``bags``. The values are gathered in one ``take``."""
    n = sparse.shape[0]
    lengths = np.empty((len(hotness), n), np.int64)
    if bags is not None:  # each jagged bag's place in the row-major values
        flat = bags.lengths.astype(np.int64).ravel()
        start = (np.cumsum(flat) - flat).reshape(n, -1)
    base = sparse.size  # values index 0..S·N-1 are sparse's cells, then the bags' values
    pieces, column, j = [], 0, 0
    for f, h in enumerate(hotness):
        if h == JAGGED:
            lengths[f] = bags.lengths[:, j]
            pieces.append(concat_ranges(start[:, j] + base, lengths[f]))
            j += 1
        else:
            lengths[f] = h
            cells = np.arange(n, dtype=np.int64)[:, None] * sparse.shape[1] + np.arange(column, column + h)
            pieces.append(cells.ravel())
            column += h
    source = sparse.ravel() if bags is None else np.concatenate([sparse.ravel(), bags.values])
    return source.take(np.concatenate(pieces)) if pieces else source[:0], lengths


def check_bags(names, lengths, values, where, max_bag=None):
    """A DataError naming the feature and the row of the first bad bag: a negative length, a bag longer than
    ``max_bag``, or lengths that do not add up to the number of values. ``where`` names the file or source."""
    lengths = np.asarray(lengths)
    for bad, what in ((lengths < 0, "a negative length"),
                      (lengths > max_bag if max_bag is not None else None, f"more than max_bag={max_bag} keys")):
        if bad is not None and bad.any():
            row, j = np.argwhere(bad)[0]
            raise DataError(f"{where}: feature {names[j]!r}, row {row}: {what} ({int(lengths[row, j])}); "
                            + ("lengths count keys, from 0" if what.startswith("a neg") else
                               "raise the cap, or truncate the bag when the data is made"))
    total = int(lengths.sum(dtype=np.int64))
    if total != len(values):
        raise DataError(f"{where}: the bags' lengths add up to {total} keys but there are {len(values)} values; "
                        "the offsets must end at the number of values")
