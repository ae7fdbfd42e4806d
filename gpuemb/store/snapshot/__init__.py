"""Snapshots of embedding tables: the HDF5 format (``format.py``), its writer and its reader, and saving and
restoring live tables with them (``tables.py``; docs/store.md, "Saving and restoring", "Snapshot format")."""
from .format import FORMAT, PARTS, VERSION, SnapshotError, TableSnapshot, layout_spans
from .reader import ChainTable, Snapshot, SnapshotChain, SnapshotTable, read_snapshot
from .tables import check_config, load_snapshot, save_snapshot
from .writer import fsync, write_snapshot

__all__ = ["FORMAT", "PARTS", "VERSION", "SnapshotError", "TableSnapshot", "layout_spans",
           "ChainTable", "Snapshot", "SnapshotChain", "SnapshotTable", "read_snapshot", "check_config",
           "load_snapshot", "save_snapshot", "fsync", "write_snapshot"]
