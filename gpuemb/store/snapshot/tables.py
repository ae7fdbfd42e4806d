"""Saving live tables to snapshots and restoring them: the glue between ``EmbeddingTable`` and the snapshot
writer and reader.

``tables`` is one ``EmbeddingTable``, a mapping of names to tables, or a list of tables (an
``EmbeddingCollection``'s ``tables``) named by their configs. A restore reads and checks every snapshot of the
chain before it imports a row, so a corrupt file or a config that does not match leaves the tables as they were;
it holds one chunk at a time (plus an incremental chain's newer keys), so a table larger than memory restores.
"""
import os
from collections.abc import Mapping

from gpuemb.autograd.plain import config_differences
from gpuemb.store.options import as_it_ran
from gpuemb.store.table import EmbeddingTable

from .format import SnapshotError, TableSnapshot
from .lifecycle import lifecycle_of, restore_lifecycle
from .reader import SnapshotChain
from .writer import write_snapshot


def named_tables(tables):
    if isinstance(tables, EmbeddingTable):
        return {tables.config.name: tables}
    if isinstance(tables, Mapping):
        return dict(tables)
    named = {t.config.name: t for t in tables}
    if len(named) != len(tables):
        raise ValueError(f"tables named {[t.config.name for t in tables]}: a snapshot holds each name once; pass "
                         "a mapping of distinct names to tables")
    return named


RESTORABLE = ("options", "lifecycle", "rounding")  # what a restore may change: where rows live, keys' fate, rounding


def check_config(part, name, live, ignore=()):
    """Raise a SnapshotError naming each field where the config of ``part``, a table ``name`` read from a snapshot,
    differs from ``live``, a live table's ``config.to_dict()``, but those a restore may change (``RESTORABLE``)
    and ``ignore`` (as ``config_differences`` takes it)."""
    diff = config_differences(as_it_ran(part.config), live, RESTORABLE + tuple(ignore), f"table {name!r}: config")
    if diff:
        fields = "; ".join(f"{f} is {saved!r} there and {now!r} here" for f, saved, now in diff)
        raise SnapshotError(f"{part.path}: table {name!r} was saved with another config: {fields}; "
                            "build the table with the config it was saved with")


def save_snapshot(tables, path, incremental=False, base=None, meta=None):
    """Write every row of ``tables`` to ``path`` (or, ``incremental`` on snapshot ``base``, the rows updated since
    the last save), then forget their dirty keys; returns the new snapshot's id, the ``base`` of the next one."""
    tables = named_tables(tables)
    if incremental:
        bounded = [name for name, t in tables.items() if t.config.options.max_rows is not None]
        if bounded:  # an incremental has no way to say a key was dropped, so a restore would bring it back
            raise ValueError(f"save_snapshot({path}): tables {bounded} drop keys past max_rows, which an "
                             "incremental snapshot cannot record; write a full snapshot of them")
        dropped = [name for name, t in tables.items() if t.life.dropped]
        if dropped:
            raise ValueError(f"save_snapshot({path}): tables {dropped} evicted or deleted keys since their last "
                             "save, which an incremental snapshot cannot record; write a full snapshot of them")
    snaps = {}
    for name, t in tables.items():
        keys = t.dirty_keys() if incremental else None
        clock, extras = lifecycle_of(t, keys)
        snaps[name] = TableSnapshot(t.config.to_dict(), t.format.layout, source=t.export(keys),
                                    part_dtypes=t.format.part_dtypes, extras=extras, clock=clock)
    snapshot_id = write_snapshot(path, snaps, incremental, base, meta)
    for t in tables.values():
        t.clear_dirty()
    return snapshot_id


def load_snapshot(tables, paths):
    """Restore fresh (empty) ``tables`` from ``paths``: a full snapshot, then its incrementals in order.

    Returns the chain's latest id, the ``base`` of the next incremental. Raises SnapshotError, having changed
    nothing, when a file is corrupt or does not fit the chain, or a table is missing or configured otherwise.
    """
    tables, paths = named_tables(tables), [os.fspath(p) for p in paths]
    chain = SnapshotChain(paths)
    for name, t in tables.items():
        if len(t):
            raise ValueError(f"load_snapshot: table {name!r} already holds {len(t)} keys, which the snapshot "
                             "would not replace; restore into a freshly built table")
        if name not in chain.tables:
            raise SnapshotError(f"load_snapshot: {paths} hold no table {name!r}, only "
                                f"{sorted(chain.tables)}; pass the snapshots this table was saved to")
        for part in chain.tables[name].parts:
            # Where the rows live is not what they are: a table may come back on another placement, cache or
            # ssd_path.
            check_config(part, name, t.config.to_dict())
    # Every chunk's checksums are checked in a first pass that keeps nothing, so a corrupt file changes no table
    # and a table larger than memory restores a chunk at a time; the second pass imports.
    counts = {name: sum(k.size for k, _, _ in chain.tables[name].chunks()) for name in tables}
    pending = {name: chain.tables[name].pending() for name in tables}  # checked here too
    ticks = {name: chain.tables[name].ticks() for name in tables}
    for name, n in counts.items():
        bound = tables[name].config.options.max_rows
        if bound is not None and n > bound:
            raise ValueError(f"load_snapshot: table {name!r} has {n} keys in the snapshot, more than its "
                             f"max_rows={bound}; raise max_rows to at least {n}")
    for name in tables:
        for keys, rows, steps in chain.tables[name].chunks():
            if keys.size:
                tables[name].import_rows(keys, rows, steps)
        restore_lifecycle(tables[name], chain.tables[name].clock, ticks[name], pending[name])
    return chain.id
