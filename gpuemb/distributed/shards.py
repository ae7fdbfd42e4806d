"""The tables one rank holds under a plan: its shard of each table, as a local ``EmbeddingTable``.

- table-wise: the whole table, on its one rank;
- row-wise: on every rank, the keys whose ``owner_hash(key) % W`` is the rank's residue (routing decides which
  keys arrive, so the local table is an ordinary one);
- column-wise: a ``ColumnShardTable`` of the shard's columns on each of its ranks;
- table-row-wise: row-wise over the ranks of one host, each holding the keys of its residue;
- grid: on each rank of a column range's host, a ``ColumnShardTable`` of the range, holding the keys of its residue;
- data-parallel: a full replica on every rank.

Each shard keeps its config's store options (device, host or ssd home, caches); an ssd home gets a file of its
own per rank, ``.rank<r>`` before the suffix. A data-parallel replica may not bound its keys (``max_rows``):
eviction depends on a rank's own lookups, so bounded replicas would drift apart.
"""
import dataclasses
import os
from dataclasses import dataclass

from gpuemb.store.table import EmbeddingTable

from .column import ColumnShardTable


@dataclass
class LocalShard:
    """This rank's piece of table ``name``: ``table``, its placement ``kind`` and weight columns ``cols``."""
    name: str
    kind: str
    cols: tuple
    table: EmbeddingTable


def rank_config(config, rank):
    """``config`` with an ssd home moved to a file of ``rank``'s own."""
    path = config.options.ssd_path
    if path is None:
        return config
    root, ext = os.path.splitext(path)
    return dataclasses.replace(config, options=dataclasses.replace(config.options, ssd_path=f"{root}.rank{rank}{ext}"))


def check_against_plan(configs, plan, world_size, owner="ShardedEmbeddingCollection"):
    """Raise ValueError naming the first table whose plan does not fit its config or the world size."""
    if plan.world_size != world_size:
        raise ValueError(f"{owner}: the plan is for {plan.world_size} ranks but the communicator has {world_size}; "
                         "plan for the world you run in")
    for c in configs:
        try:
            p = plan.placement(c.name)
        except KeyError as e:
            raise ValueError(f"{owner}: {e.args[0]}; plan every table of the collection") from None
        if p.table.dim != c.dim:
            raise ValueError(f"{owner}: table {c.name!r} has dim {c.dim} but the plan has dim {p.table.dim}; plan "
                             "the tables with their configs (TableSpec.from_config)")
        if p.kind == "data" and c.options.max_rows is not None:
            raise ValueError(f"{owner}: table {c.name!r} is data-parallel with max_rows={c.options.max_rows}; "
                             "replicas must hold the same keys, so drop max_rows or shard the table")


def local_shards(configs, plan, rank):
    """``{name: LocalShard}`` of the tables ``configs`` that ``rank`` holds under ``plan``."""
    out = {}
    for c in configs:
        p = plan.placement(c.name)
        for s in p.shards:
            if s.rank != rank:
                continue
            cfg = rank_config(c, rank)
            table = ColumnShardTable(cfg, s.cols) if tuple(s.cols) != (0, c.dim) else EmbeddingTable(cfg)
            out[c.name] = LocalShard(c.name, p.kind, tuple(s.cols), table)
    return out
