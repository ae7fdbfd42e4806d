"""Snapshots of embedding tables: the HDF5 format (``format.py``), its writer and its reader, and saving and
restoring live tables with them (``tables.py``; docs/store.md, "Saving and restoring", "Snapshot format"), and
delta files of a table's changes since a marker (``delta.py``; docs/store.md, "Deltas")."""
from .format import FORMAT, PARTS, VERSION, SnapshotError, TableSnapshot, layout_spans
from .reader import ChainTable, Snapshot, SnapshotChain, SnapshotTable, read_snapshot
from .tables import check_config, load_snapshot, save_snapshot
from .writer import fsync, write_snapshot
from .delta import apply_delta, save_delta

__all__ = ["FORMAT", "PARTS", "VERSION", "SnapshotError", "TableSnapshot", "layout_spans",
           "ChainTable", "Snapshot", "SnapshotChain", "SnapshotTable", "read_snapshot", "check_config",
           "load_snapshot", "save_snapshot", "fsync", "write_snapshot", "apply_delta", "save_delta"]
