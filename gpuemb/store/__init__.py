"""The tiered embedding store: key encoding, slab allocation, device/host/SSD tiers (docs/design.md, "The
embedding store"), usable on its own from any stack (docs/store.md, "The store on its own").

What a caller holds: a table or a collection of tables, their configs, the errors they raise, ``release`` for
a lookup whose backward will never come, and snapshots."""
from .collection import EmbeddingCollection, feature_keys
from .errors import RowStateError, SsdFileError, StoreError, StoreFullError
from .batch import LeaseError, release
from .options import Initializer, StoreOptions, TableConfig
from .snapshot import SnapshotError, load_snapshot, save_snapshot
from .table import EmbeddingTable

__all__ = ["EmbeddingCollection", "EmbeddingTable", "Initializer", "LeaseError", "RowStateError", "SnapshotError",
           "SsdFileError", "StoreError", "StoreFullError", "StoreOptions", "TableConfig", "feature_keys",
           "load_snapshot", "release", "save_snapshot"]
