"""The requester's half of row-wise bags: the partial rows its owners sent back, combined into whole bags.

A row-wise bag went as one sub-bag to each rank owning a key of it; each such owner pooled its sub-bag (sum, a
weighted sum, or max) and sent back one partial row, in the order the sub-bags went. ``RowPartials`` groups the
partials by bag, owner after owner, and combines them with the embedding-bag kernel as a segment reduction over
the partials (one launch for every row-wise stream of a width, whatever the number of tables): their sum, divided
by the whole bag's length for a mean, or their element-wise max, keeping which partial won each element for the
backward. A bag none of whose keys any owner holds (an empty bag) sent nothing and stays zeros, as in one process.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, to_device
from gpuemb.kernels.embedding_bag import embedding_bag, embedding_bag_max


class RowPartials:
    """From ``pos [E]`` (each partial's bag: its place ``b·F + f``, offset where a grid's column ranges share a
    group) and ``lengths [E]`` (its sub-bag's keys), in
    the order the partials come back. ``bags [n]``: the places of the bags that have partials, ascending."""

    def __init__(self, pos, lengths):
        self.order = np.argsort(pos, kind="stable")  # a bag's partials side by side, in owner order
        self.bags, first, counts = np.unique(pos[self.order], return_index=True, return_counts=True)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.sizes = np.add.reduceat(lengths[self.order], first) if first.size else np.zeros(0, np.int64)
        self.bag_of = np.empty(pos.size, np.int64)  # each partial's bag, an index into ``bags``
        self.bag_of[self.order] = np.repeat(np.arange(self.bags.size), counts)
        self.slot = np.empty(pos.size, np.int32)  # each partial's position among the ordered partials
        self.slot[self.order] = np.arange(pos.size)
        self.argmax = None

    def combine(self, parts, mode):
        """The bags' rows ``[n, w]`` from the partial rows ``parts [E, w]`` (sum or max pooled at the owners)."""
        order, offsets = to_device(self.order), to_device(self.offsets)
        if mode == "max":  # ties go to the first partial of the bag: the lowest rank's
            pooled, self.argmax = embedding_bag_max(parts, order, offsets)
            return pooled
        pooled = embedding_bag(parts, order, offsets, "sum")
        return pooled / self._sizes() if mode == "mean" else pooled

    def grads(self, gy, mode):
        """Each partial's gradient ``[E, w]`` from its bag's ``gy [n, w]``: the bag's (over the bag's length for
        a mean); for max, only the elements its partial won, zeros elsewhere."""
        if mode == "mean":
            gy = gy / self._sizes()
        g = gy[to_device(self.bag_of)]
        if mode != "max":
            return g
        xp = get_array_module(gy)
        return xp.where(self.argmax[to_device(self.bag_of)] == to_device(self.slot)[:, None], g, 0).astype(g.dtype)

    def _sizes(self):
        return to_device(self.sizes, np.float32)[:, None]
