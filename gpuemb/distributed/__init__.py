"""gpuemb.distributed: embeddings sharded over ranks (model-parallel), dense layers data-parallel, and snapshots
that reshard across world sizes (docs/design.md, "Communication and sharding"; docs/distributed.md)."""
from .sharded_collection import ShardedEmbeddingCollection
from .column import ColumnShardTable
from .dense import GradientAllreduce, broadcast_parameters
from .distribute_model import distribute
from .default_plan import plan_for
from .routing import Arrivals, Route, Stream, streams_of
from .bag_routing import ArrivedBags, BagRoute
from .bags import LocalBags, local_bags
from .sharded_snapshot import load_sharded, load_sharded_tables, save_sharded, shard_path

__all__ = ["ShardedEmbeddingCollection", "ColumnShardTable", "GradientAllreduce", "broadcast_parameters",
           "distribute", "plan_for", "Arrivals", "Route", "Stream", "streams_of",
           "ArrivedBags", "BagRoute", "LocalBags", "local_bags", "save_sharded", "load_sharded",
           "load_sharded_tables", "shard_path"]
