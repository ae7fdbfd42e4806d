"""The home level of the embedding store: the ``RowLevel`` at the bottom of a table, which holds every key.

An absent key is new there: its rows come from the table's initializer and are written at once. Below a cache
(host or ssd placement) the home grows without bound; as the only level (device placement) it may be bounded by
``max_rows``, and then it drops the keys it evicts, rows and all (``level.py`` has the common mechanics).
"""
import numpy as np

from gpuemb.autograd.backend import is_device_array, to_host

from .level import RowLevel


class HomeLevel(RowLevel):
    """Every key's rows in ``tier``; ``new_rows(keys, tags) -> (rows [n, width], steps [n])`` makes those of new
    keys (of tables ``tags``, or None). ``bound`` (``max_rows``; None: grows) and ``policy`` choose which keys a
    full home drops; ``life``: the table's ``KeyLife``, which keeps each row's last change tick here where it asks;
    ``pins``: keep pins where unbounded (a table that evicts by a rule); ``owners``: keep each row's table (a store of
    several)."""

    def __init__(self, tier, new_rows, life, bound=None, policy="lru", pins=False, owners=False):
        super().__init__(tier, bound, policy, ticks=life.ticks, pins=pins, owners=owners)
        self.new_rows, self.life = new_rows, life
        life.attach(self)

    def flush(self, chunk=1 << 16):
        """Nothing to write down, the home being the bottom; but wait until the tier's own background writes have
        landed, so an error among them is raised here (before a snapshot of the rows is renamed into place)."""
        self.tier.sync()

    def _fetch(self, keys, miss, tags=None):
        if is_device_array(miss):  # draw every key's row rather than count the new ones: nothing is read back
            return self.new_rows(keys, tags)
        # On the host, compacting is free and drawing is not.
        rows, steps = self.new_rows(keys[miss], None if tags is None else tags[miss])
        full_rows = np.zeros((keys.shape[0], rows.shape[1]), rows.dtype)
        full_steps = np.zeros(keys.shape[0], steps.dtype)
        full_rows[miss], full_steps[miss] = rows, steps
        return full_rows, full_steps

    def _evicting(self, slots):
        """Nothing to write: the evicted keys are dropped."""

    def ticks(self, keys=None, chunk=1 << 16):
        """``[n, 2]`` int64 NumPy (key, tick) of the last update of every key here, or of those of ``keys`` here."""
        if keys is None:
            pairs = [(to_host(k), to_host(self.touched[s])) for k, s in self.index.items(chunk)]
        else:
            keys = np.asarray(keys, np.int64)
            slots = to_host(self.locate(self.here(keys)))
            pairs = [(keys[slots >= 0], to_host(self.touched[self.here(slots[slots >= 0])]))]
        return np.concatenate([np.stack([k, t.astype(np.int64)], 1) for k, t in pairs] + [np.zeros((0, 2), np.int64)])
