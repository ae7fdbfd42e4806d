"""A batch of rows: the three arrays every reader, shard, generator and loader hands around, and the bags of its
jagged features where it has any (:mod:`gpuemb.io.bags`)."""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd import backend

from .bags import Bags


@dataclass(frozen=True, eq=False)
class Batch:
    """label float32 ``[N]`` (or ``[N, T]`` for T tasks), dense float32 ``[N, n_dense]``, sparse int64 ``[N, S]``
    (the features of fixed hotness), and ``bags``: the jagged features' :class:`Bags`, or None where there are none."""
    label: np.ndarray
    dense: np.ndarray
    sparse: np.ndarray
    bags: Bags = None

    @property
    def rows(self):
        return self.label.shape[0]

    def arrays(self):
        return self.label, self.dense, self.sparse

    def slice(self, a, b):
        """Rows ``a:b`` as views (the batch itself where that is all of it: a loader's batch of JaggedFeatures)."""
        if a == 0 and b >= self.rows:
            return self
        return Batch(self.label[a:b], self.dense[a:b], self.sparse[a:b], self.bags and self.bags.slice(a, b))

    def take(self, rows):
        """The rows at the indices ``rows``, copied."""
        return Batch(self.label[rows], self.dense[rows], self.sparse[rows], self.bags and self.bags.take(rows))

    @staticmethod
    def concat(batches):
        """One batch holding the rows of ``batches`` in order."""
        bags = Bags.concat([b.bags for b in batches]) if batches[0].bags is not None else None
        return Batch(*(np.concatenate(parts) for parts in zip(*(b.arrays() for b in batches))), bags)


class Staging:
    """One page-locked host buffer that holds a batch's three arrays side by side, so the batch goes to the device
    in a single copy: one transfer a step rather than one per array. ``arrays`` are the host views to fill."""

    ALIGN = 8  # each array starts on a multiple of its widest item (int64)

    def __init__(self, like, rows):
        self._allocate([((rows,) + a.shape[1:], a.dtype) for a in like.arrays()])

    @classmethod
    def holding(cls, arrays):
        """A staging buffer holding copies of the host ``arrays``, of any shapes (a jagged batch's)."""
        staging = cls.__new__(cls)
        staging._allocate([(a.shape, a.dtype) for a in arrays])
        for dst, src in zip(staging.arrays, arrays):
            dst[...] = src
        return staging

    def _allocate(self, shapes):
        self.layout, end = [], 0
        for shape, dtype in shapes:
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            self.layout.append((end, nbytes, np.dtype(dtype), shape))
            end += -(-nbytes // self.ALIGN) * self.ALIGN
        self.buffer = backend.pinned_empty(max(end, self.ALIGN), np.uint8)
        self.arrays = [self._view(self.buffer, *part) for part in self.layout]

    @staticmethod
    def _view(buffer, start, nbytes, dtype, shape):
        return buffer[start:start + nbytes].view(dtype).reshape(shape)

    def upload(self):
        """The arrays on the device (on the CPU, the staging arrays themselves), by one copy of the buffer."""
        device = backend.to_device(self.buffer)
        return [self._view(device, *part) for part in self.layout]
