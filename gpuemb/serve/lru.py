"""A bounded host cache of decoded rows: at most ``capacity`` rows, the least recently used evicted first."""
from collections import OrderedDict

import numpy as np


class RowCache:
    """Rows ``[D]`` float32 by their position in a table's file, in one ``[capacity, D]`` slab."""

    def __init__(self, capacity, dim):
        if capacity < 1:
            raise ValueError(f"host_cache_rows={capacity}; use at least 1, or None to load every row")
        self.capacity, self.slab = capacity, np.empty((capacity, dim), np.float32)
        self.slots = OrderedDict()  # position -> slot in the slab, least recently used first

    def __len__(self):
        return len(self.slots)

    def get(self, positions):
        """``(rows [n, D], hit [n])``: the cached rows of ``positions`` (garbage where not hit), now most recent."""
        hit = np.array([p in self.slots for p in positions.tolist()], bool)
        at = [self.slots[p] for p in positions[hit].tolist()]
        for p in positions[hit].tolist():
            self.slots.move_to_end(p)
        rows = np.empty((positions.size, self.slab.shape[1]), np.float32)
        rows[hit] = self.slab[at]
        return rows, hit

    def put(self, positions, rows):
        """Keep ``rows`` of ``positions`` (not cached yet), evicting the least recently used; past capacity only
        the last ones stay."""
        for p, row in zip(positions[-self.capacity:].tolist(), rows[-self.capacity:]):
            if len(self.slots) < self.capacity:
                slot = len(self.slots)
            else:
                _, slot = self.slots.popitem(last=False)
            self.slots[p] = slot
            self.slab[slot] = row
