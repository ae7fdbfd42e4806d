"""The lifecycle of a table's keys, with one writer: the update clock, each row's tick of its last change, the
admission's pending counts, and the log of dropped keys (docs/store.md, "Admission", "Eviction", "Deltas").

The clock counts the table's update batches. Where the table keeps ticks (``TableConfig(track_updates=True)``, or
an evict rule by age), a row inserted, imported or updated while the clock reads c is stamped c + 1, so that a
marker taken at c sees it; the stamps live beside the rows, one per slot of the home level (``RowLevel.touched``),
and only this object writes them. The keys a table drops are logged with the tick of the drop, for the deltas; the
log is trimmed by its consumer (``delta.py``). The pending counts of admission (``admission.py``) are stamped with
the clock when counted, for ``ttl_steps``.

Everything that changes these goes through here: the table's update (``tick``), inserts and imports (``stamp``),
drops (``log_drops``), admission (``admit``, ``forget``, ``expire``), a delta's trim (``trim``), and a restore from a
snapshot or a delta (``restore``, ``advance_to``). Readers (eviction's ages, snapshots) read ``clock``,
``home.touched`` and ``admission``.
"""
import numpy as np

from gpuemb.autograd.backend import to_host

from .admission import Admission


class KeyLife:
    """The lifecycle of the keys of the table called ``name``: ``ticks``, whether each row's last change is kept;
    ``admit_after`` > 1, admission after that many batches; ``evict`` and ``every``: the rule to evict by every
    that many update batches (0: never by itself)."""

    def __init__(self, name, ticks=False, admit_after=1, every=0):
        self.name, self.ticks, self.every = name, ticks, every
        self.clock = 0
        self.home = self.admission = None  # set by ``attach``, once the home level is built
        self._after = admit_after
        self.deleted = []  # (tick, keys) of the keys dropped, for deltas; only where ticks are kept
        self.trimmed = 0  # the oldest marker a delta can be taken since: the drops before it are forgotten
        self.dropped = False  # whether keys were dropped since the last incremental snapshot (``clear_dropped``)

    def attach(self, home):
        """Keep the lifecycle of the keys of ``home`` (a ``HomeLevel``), whose slots hold the ticks."""
        self.home = home
        self.admission = Admission(self._after, home, self) if self._after > 1 else None

    # -- the table's update and inserts -------------------------------------------------------------------------
    def stamp(self, slots):
        """The home's rows at ``slots`` were inserted or imported: changed at the next tick."""
        if self.home.touched is not None:
            self.home.touched[slots] = self.clock + 1

    def tick(self, slots=None):
        """One more update batch: stamp its rows at the home's ``slots`` (None where no ticks are kept); returns
        whether an eviction is due."""
        self.clock += 1
        if slots is not None:
            self.home.touched[slots] = self.clock
        return bool(self.every) and self.clock % self.every == 0

    def log_drops(self, keys):
        """``keys`` (NumPy, some) were dropped from every level."""
        if self.home.touched is not None:
            self.deleted.append((self.clock + 1, keys))
        self.dropped = True

    def clear_dropped(self):
        self.dropped = False

    # -- admission -----------------------------------------------------------------------------------------------
    def admit(self, unique, inverse):
        """As ``Admission.admit``: count a training batch's pending keys, and say which have rows."""
        return self.admission.admit(unique, inverse)

    def forget(self, keys):
        """Drop the pending counts of ``keys`` (a delete); a table without admission has none."""
        if self.admission is not None:
            self.admission.forget(keys)

    def expire(self, ttl_steps):
        """Drop the pending keys not counted within ``ttl_steps`` update batches (an evict rule's age)."""
        if self.admission is not None and ttl_steps is not None:
            self.admission.expire(ttl_steps)

    # -- deltas and restores -------------------------------------------------------------------------------------
    def trim(self, since):
        """The keys dropped after marker ``since``, NumPy arrays; the log forgets those before it, as a consumer
        that asked since a marker only asks since later ones."""
        if since < self.trimmed:
            raise ValueError(f"{self.name}.delta: deltas before marker {self.trimmed} were trimmed (a delta since it "
                             f"was taken), so one since marker {since} cannot say what was dropped; take a new base "
                             "snapshot and ask for deltas since its marker")
        self.deleted[:] = [(tick, k) for tick, k in self.deleted if tick > since]
        self.trimmed = since
        return [k for _, k in self.deleted]

    def restore(self, clock, ticks, pending):
        """Set the clock, each held key's tick from ``ticks`` ``[n, 2]`` (key, tick), and the pending counts, of a
        table whose rows are imported already. A snapshot from before the clock was saved (``clock`` None) restarts
        it at 0; keys without a tick (``ticks`` None) read as updated now; pending counts saved without the clock when
        last counted (``[n, 2]``) read as counted now. The drops before it are not saved, so a delta starts there."""
        self.clock = self.trimmed = clock or 0
        home = self.home
        if home.touched is not None:
            home.touched[:] = self.clock
            if ticks is not None:
                slots = to_host(home.locate(home.here(ticks[:, 0])))
                held = slots >= 0
                home.touched[home.here(slots[held])] = home.here(ticks[held, 1].astype(np.int32))
        if pending is not None and self.admission is not None:
            self.admission.set_counts(pending[:, 0], pending[:, 1], pending[:, 2] if pending.shape[1] > 2 else None)

    def advance_to(self, clock):
        """A delta up to marker ``clock`` was applied: the table is at that marker now."""
        self.clock = clock
