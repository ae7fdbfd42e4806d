"""Deltas for online serving: what changed in a table since a marker (docs/store.md, "Deltas").

A table that keeps ticks (``TableConfig(track_updates=True)``, or an evict rule by age) stamps each row it
inserts or updates with its update clock (``RowLevel.touched``), and logs the keys it drops with the tick of the
drop (``KeyLife.deleted``, keylife.py). A marker is the clock's value; the delta since it is every key stamped later,
with its row and steps as they are now, and every key dropped later that the table does not hold again (a key
dropped then inserted again is an update). Applying the deltas of consecutive markers, in order, to a copy of
the table at the first one gives the table as it is now. Nothing here touches ``dirty_keys()``, which incremental
snapshots own.

The drop log is bounded by its consumer: a delta since a marker forgets the drops at or before it, as a consumer
that has asked since a marker only asks since later ones; so the log holds the drops since the marker of the last
delta, two deltas' worth where each is taken since the marker returned with the one before. A
delta since an older marker than one asked before cannot be answered (its drops are gone) and raises.
"""
import numpy as np

from gpuemb.autograd.backend import to_host


def changes_since(table, since, chunk=1 << 16):
    """``(keys, rows, steps, deleted)`` NumPy arrays of ``table`` since marker ``since``: see the module docstring."""
    home = table.home
    if home.touched is None:
        raise ValueError(f"{table.config.name}.delta: the table keeps no update ticks; build it with "
                         "TableConfig(track_updates=True)")
    logged = table.life.trim(since)
    table.top.flush()
    changed = [to_host(keys[home.touched[slots] > since]) for keys, slots in home.index.items(chunk)]
    keys = np.sort(np.concatenate(changed + [np.zeros(0, np.int64)]))
    got = list(table.export(keys))
    rows = np.concatenate([r for _, r, _ in got] or [np.zeros((0, home.tier.width), home.tier.dtype)])
    steps = np.concatenate([s for _, _, s in got] or [np.zeros(0, np.int32)])
    dropped = np.unique(np.concatenate(logged + [np.zeros(0, np.int64)]))
    deleted = dropped[to_host(home.locate(home.here(dropped)) < 0)]
    return np.concatenate([k for k, _, _ in got] or [np.zeros(0, np.int64)]), rows, steps, deleted
