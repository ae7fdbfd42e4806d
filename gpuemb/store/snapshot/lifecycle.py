"""What a snapshot keeps of a table's lifecycle beside its rows (docs/store.md, "Saving and restoring"): the update
clock (the table group's ``clock`` attribute), each key's last update tick (``ticks``, where the table keeps
them) and the admission's pending counts (``pending``), so a restored table ages, evicts and admits keys as the
saved one would have: a resume continues bit for bit with the lifecycle on.
"""
import numpy as np


def lifecycle_of(t, keys=None):
    """``(clock, extras)`` of table ``t`` for a snapshot of its rows, all or those of ``keys`` (an incremental's):
    the ticks of those rows, and every pending count (each snapshot holds all of them)."""
    extras = {}
    if t.admission is not None:
        counts = [np.stack(kcs, 1) for kcs in t.admission.counts()]
        extras["pending"] = np.concatenate(counts or [np.zeros((0, 3), np.int64)])
    if t.home.touched is not None:
        extras["ticks"] = t.home.ticks(keys)
    return t.life.clock, extras or None


def restore_lifecycle(t, clock, ticks, pending):
    """Set the clock, ticks and pending counts of ``t``, whose rows are imported already; a snapshot from before
    the clock was saved (``clock`` None) restarts it at 0, and every key's tick at the clock; pending counts saved
    without the clock when last counted (``[n, 2]``) read as counted now."""
    t.life.restore(clock, ticks, pending)
