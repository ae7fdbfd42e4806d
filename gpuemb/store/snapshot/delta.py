"""Delta files: a table's changes since a marker as an HDF5 snapshot of kind ``delta`` (docs/store.md,
"Deltas"), and applying them to live tables.

A delta file is a snapshot (``format.py``: CRC per chunk, written to a temp file and renamed) whose ``kind`` is
``"delta"``: each table's group holds the rows inserted or updated since its marker, as a full snapshot holds
rows, and a ``deleted`` dataset of the keys dropped since then; its meta records ``since`` and ``until``, the
markers it spans. A base snapshot taken at a marker, then the deltas of consecutive markers applied in order,
give the live table, keys, rows and steps. A delta whose ``deleted`` is missing (its name damaged, say) is refused:
applied without it, the consumer would keep the keys the live table dropped.
"""
import os
from collections.abc import Mapping

from .format import SnapshotError, TableSnapshot
from .reader import read_snapshot
from .tables import named_tables, check_config
from .writer import write_snapshot


def save_delta(tables, path, since, meta=None):
    """Write the changes of ``tables`` after ``since`` (a marker, or ``{name: marker}``) to the delta file
    ``path``, with ``meta`` beside the markers (a sharded run's: the rank and its shards' placement); returns
    ``{name: marker}`` of now, the ``since`` of the next delta."""
    tables = named_tables(tables)
    snaps, until = {}, {}
    for name, t in tables.items():
        until[name] = t.marker()
        keys, rows, steps, deleted = t.delta(since[name] if isinstance(since, Mapping) else since)
        snaps[name] = TableSnapshot(t.config.to_dict(), t.format.layout, keys, rows, steps,
                                    part_dtypes=t.format.part_dtypes, extras={"deleted": deleted})
    write_snapshot(path, snaps, meta={**(meta or {}), "since": since, "until": until}, delta=True)
    return until


def _marker(markers, name):
    """A table's marker in a delta's meta: one for every table, or ``{name: marker}``."""
    return markers.get(name) if isinstance(markers, Mapping) else markers


def apply_delta(tables, path):
    """Apply the delta file ``path`` to live ``tables`` (restored from the base, then from the deltas before it):
    drop its deleted keys and set its rows, then move each table's marker to the delta's end. Every chunk is
    checked, and each table's marker against the delta's start, before any table changes: a delta skipped, given
    twice or out of order would leave a table that no live one ever was."""
    tables, path = named_tables(tables), os.fspath(path)
    snap = read_snapshot(path)
    if snap.kind != "delta":
        raise SnapshotError(f"{path}: is a {snap.kind} snapshot, not a delta; restore it with load_snapshot")
    parts = {}
    for name, t in tables.items():
        if name not in snap.tables:
            raise SnapshotError(f"{path}: holds no table {name!r}, only {sorted(snap.tables)}; pass the delta "
                                "this table's changes were saved to")
        since = _marker(snap.meta.get("since"), name)
        if since is not None and since != t.marker():
            raise SnapshotError(f"{path}: table {name!r} holds the changes after marker {since}, but the table is "
                                f"at marker {t.marker()}; apply the deltas in the order they were saved, from the "
                                "base snapshot taken at the first one's marker")
        part = parts[name] = snap.tables[name]
        check_config(part, name, t.config.to_dict())
        for _ in part.chunks():  # checks every chunk's checksums, keeping nothing
            pass
        part.extra("deleted")
    for name, t in tables.items():
        t.delete(parts[name].extra("deleted"))  # a delta's table without it is a SnapshotError (reader.py)
        for keys, rows, steps in parts[name].chunks():
            if keys.size:
                t.import_rows(keys, rows, steps)
        until = _marker(snap.meta.get("until"), name)
        if until is not None:
            t.life.advance_to(until)
