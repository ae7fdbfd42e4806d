"""A cache level of the embedding store: a bounded ``RowLevel`` over the level below it, with write-back.

A miss brings the row up from below (``take``); an evicted row that changed here (dirty) is written down first,
and ``flush`` writes every dirty row down, level by level, to the home (``level.py`` has the common mechanics).
"""
import numpy as np

from .level import RowLevel


class CacheLevel(RowLevel):
    """At most ``bound`` rows of ``below``'s keys in ``tier``, evicting by ``policy``; ``what`` names the setting
    that sizes the bound (``cache_rows``, ``host_cache_rows``) in errors."""

    def __init__(self, tier, bound, policy, below, what):
        super().__init__(tier, bound, policy, what)
        self.below = below

    def flush(self, chunk=1 << 16):
        dirty = np.flatnonzero(self.policy.occupied & self.dirty)
        step = min(chunk, self.below.bound or chunk)  # a bounded level below takes at most its bound at once
        for start in range(0, dirty.size, step):
            self._write_down(dirty[start:start + step])
        self.below.flush(chunk)

    def _fetch(self, keys):
        return self.below.take(keys)

    def _evicting(self, slots):
        dirty = slots[self.dirty[slots]]
        if dirty.size:
            self._write_down(dirty)

    def _write_down(self, slots):
        self.below.put(self.keys[slots], self.tier.read(slots), self.steps[slots])
        self.dirty[slots] = False
