"""The home level of the embedding store: the ``RowLevel`` at the bottom of a table, which holds every key.

An absent key is new there: its rows come from the table's initializer and are written at once. Below a cache
(host or ssd placement) the home grows without bound; as the only level (device placement) it may be bounded by
``max_rows``, and then it drops the keys it evicts, rows and all (``level.py`` has the common mechanics).
"""
from .level import RowLevel


class HomeLevel(RowLevel):
    """Every key's rows in ``tier``; ``new_rows(keys) -> (rows [n, width], steps [n])`` makes those of new keys.
    ``bound`` (``max_rows``; None: grows) and ``policy`` choose which keys a full home drops."""

    def __init__(self, tier, new_rows, bound=None, policy="lru"):
        super().__init__(tier, bound, policy)
        self.new_rows = new_rows

    def flush(self, chunk=1 << 16):
        """Nothing to write: the home is the bottom."""

    def _fetch(self, keys):
        return self.new_rows(keys)

    def _evicting(self, slots):
        """Nothing to write: the evicted keys are dropped."""
