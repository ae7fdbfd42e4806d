"""Snapshots of embedding tables: the HDF5 format (``format.py``), its writer and its reader (docs/store.md,
"Snapshot format")."""
from .format import FORMAT, PARTS, VERSION, SnapshotError, TableSnapshot, layout_spans, plain
from .reader import ChainTable, Snapshot, SnapshotChain, SnapshotTable, read_snapshot
from .writer import fsync, write_snapshot

__all__ = ["FORMAT", "PARTS", "VERSION", "SnapshotError", "TableSnapshot", "layout_spans", "plain", "ChainTable",
           "Snapshot", "SnapshotChain", "SnapshotTable", "read_snapshot", "fsync", "write_snapshot"]
