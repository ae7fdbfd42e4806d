"""The embedding store as a train record shows it: per store, its levels' rows, bytes, hit rate and evictions over
the window since the last record, its keys and its pending admissions; and the device caches' hit rate.

A store is what holds rows: a table, or the store of the tables that a collection batches together
(``gpuemb/store/batched.py``), which share their levels and so their hits; it is named as its config is (``C1..C26
(26 tables)``). A level counts its hits, misses and evictions in three int64s beside its rows, on the level's
device (``level.RowLevel.counters``): reading them is one read back for a device level, nothing for a host one.
So a record reads, per device level, its counters and its row count (2 reads), and per table with admission its
pending keys (2 more); a step reads none of them. Rates are over the window: the counters at the last record are
kept and subtracted. ``restart()`` takes them again, so that an evaluation's lookups, or a checkpoint's, are not
counted as the training's.
"""
from gpuemb.autograd.backend import to_host
from gpuemb.store.tiers import DeviceTier


def stores_of(tables):
    """``{name: store}`` of the physical stores of ``tables`` (``{name: table}``), once each."""
    stores = {}
    for table in tables.values():
        store = getattr(table, "store", table)  # a BatchedTable is one table of its store
        stores.setdefault(store.config.name, store)
    return stores


def tier_name(tier):
    """``device``, ``host`` or ``ssd``, from the tier's class."""
    return type(tier).__name__.removesuffix("Tier").lower()


def _rate(hits, misses):
    return hits / (hits + misses) if hits + misses else None


class TableWindow:
    """The levels of ``tables`` (``{name: table}``) over the steps since the last record; see the module docstring."""

    def __init__(self, tables):
        self.stores = stores_of(tables)
        self.restart()

    def _counters(self):
        return {name: [[int(n) for n in to_host(level.counters)] for level in store.levels]
                for name, store in self.stores.items()}

    def restart(self):
        """Count from here: the window starts now."""
        self._last = self._counters()

    def record(self):
        """``(tables, (cache hits, cache misses, whether any store has a device cache))`` over the window, then a new
        window starts. ``tables``: ``{store: {"levels": [{"tier", "rows", "bytes", "hit_rate", "evictions"}],
        "keys", "pending"}}``, top level first; ``pending`` only where the table admits keys after several batches."""
        now, out, cache = self._counters(), {}, [0, 0, False]
        for name, store in self.stores.items():
            levels = []
            for level, (h, m, e), (h0, m0, e0) in zip(store.levels, now[name], self._last[name]):
                levels.append({"tier": tier_name(level.tier), "rows": len(level), "bytes": level.tier.nbytes,
                               "hit_rate": _rate(h - h0, m - m0), "evictions": e - e0})
            out[name] = {"levels": levels, "keys": levels[-1]["rows"]}  # the home holds every key
            if getattr(store, "admission", None) is not None:
                out[name]["pending"] = len(store.admission)
            if len(store.levels) > 1 and isinstance(store.top.tier, DeviceTier):  # a device cache over the home
                (h, m, _), (h0, m0, _) = now[name][0], self._last[name][0]
                cache = [cache[0] + h - h0, cache[1] + m - m0, True]
        self._last = now
        return out, tuple(cache)


def hit_rate(hits, misses, cached):
    """The device caches' hit rate, None without a cache or without a lookup."""
    return _rate(hits, misses) if cached else None
