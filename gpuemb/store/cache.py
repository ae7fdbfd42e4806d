"""A cache level of the embedding store: a bounded ``RowLevel`` over the level below it, with write-back.

A miss brings the row up from below (``take``); an evicted row that changed here (dirty) is written down first,
and ``flush`` writes every dirty row down, level by level, to the home (``level.py`` has the common mechanics).
"""
import numpy as np

from gpuemb.autograd.backend import to_host

from .level import RowLevel


def _pack(xp, *parts):
    """The bytes of ``parts`` (arrays with ``n`` rows) side by side, ``[n, bytes]`` uint8: one copy moves them all."""
    n = parts[0].shape[0]
    return xp.concatenate([xp.ascontiguousarray(p.reshape(n, -1 if n else 1)).view(np.uint8) for p in parts], 1)


def _unpack(xp, packed, *dtypes_widths):
    """The parts of ``_pack``'s bytes, given each part's ``(dtype, columns)``."""
    out, start = [], 0
    for dtype, width in dtypes_widths:
        stop = start + np.dtype(dtype).itemsize * width
        part = xp.ascontiguousarray(packed[:, start:stop]).view(dtype)
        out.append(part if width > 1 or part.ndim != 2 else part.reshape(-1))
        start = stop
    return out


class CacheLevel(RowLevel):
    """At most ``bound`` rows of ``below``'s keys in ``tier``, evicting by ``policy``; ``what`` names the setting
    that sizes the bound (``cache_rows``, ``host_cache_rows``) in errors, and ``share`` how many batched tables'
    settings it sums.

    Traffic with the level below, per batch: the missed keys go down, their rows and steps come up, and the dirty
    rows it evicts go down with their keys and steps, one packed copy each (``_pack``), and none when empty."""
    writes_down = True

    def __init__(self, tier, bound, policy, below, what, share=1):
        super().__init__(tier, bound, policy, what)
        self.below, self.share = below, share

    def flush(self, chunk=1 << 16):
        held = self.policy.occupied & self.dirty
        held[-1:] = False  # the dump row
        dirty = to_host(self.xp.flatnonzero(held))
        step = min(chunk, self.below.bound or chunk)  # a bounded level below takes at most its bound at once
        for start in range(0, dirty.size, step):
            self._write_down(self.xp.asarray(dirty[start:start + step]))
        self.below.flush(chunk)

    def _fetch(self, keys, miss, tags=None):
        xp, width = self.xp, self.tier.width
        at = xp.flatnonzero(miss)
        rows = xp.zeros((keys.shape[0], width), self.tier.dtype)
        steps = xp.zeros(keys.shape[0], np.int32)
        if at.shape[0]:
            got, got_steps = self.below.take(to_host(keys[at]), None if tags is None else to_host(tags[at]))
            got, got_steps = _unpack(xp, self.here(_pack(np, got, got_steps.astype(np.int32))),
                                     (self.tier.dtype, width), (np.int32, 1))
            rows[at], steps[at] = got, got_steps
        return rows, steps

    def _evicting(self, slots):
        dirty = slots[self.dirty[slots]]
        if dirty.shape[0]:
            self._write_down(dirty)

    def _write_down(self, slots):
        xp = self.xp
        rows, steps = self.read(slots)
        packed = to_host(_pack(xp, self.keys[slots], rows, steps))
        keys, rows, steps = _unpack(np, packed, (np.int64, 1), (self.tier.dtype, self.tier.width), (np.int32, 1))
        self.below.put(keys, rows, steps)
        self.dirty[slots] = False
