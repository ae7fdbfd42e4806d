"""A plan for a collection's tables when none is given: the sharding planner over equal ranks, or every table
table-row-wise or grid over hosts (``sharding.hierarchical``)."""
from gpuemb.sharding import RankBudget, TableSpec, plan_tables
from gpuemb.sharding.hierarchical import plan_hosts
from gpuemb.sharding.plan import HOST_KINDS

DEFAULT_ROWS = 1 << 20
DEFAULT_DEVICE_BYTES = 16 << 30


def plan_for(configs, world_size, n_features=None, rows=DEFAULT_ROWS, device_bytes=DEFAULT_DEVICE_BYTES,
             batch_size=65536, codec="fp32", sharding="auto", local_ranks=None, hotness=None, **planner):
    """``plan_tables`` of the table ``configs`` over ``world_size`` ranks of ``device_bytes`` each.

    ``rows``: the keys each table is expected to hold (an int, or ``{name: rows}``); a table shared by
    ``n_features`` features is looked up that many times a sample, one vector a feature (unpooled). ``hotness``:
    ``{name: keys a sample}`` of tables whose feature pools a fixed number of keys (multi-hot), one bag a sample;
    the others one key. ``planner``: more ``plan_tables`` arguments (``dp_max_bytes``, ``cache_fraction``).
    ``sharding`` ``table_row`` or ``grid`` places every table so over hosts of ``local_ranks`` ranks (default: one
    host of all).
    """
    # A shared table's features are looked up one key each and each feature's vector travels on its own, so its
    # lookups are not one pooled bag: unpooled, the cost model counts one vector a lookup, as the exchange sends.
    # A multi-hot feature's keys are one bag, so its table's partials (and the planner's 2-D choices) follow them.
    hotness = hotness or {}
    specs = [TableSpec.from_config(c, rows.get(c.name, DEFAULT_ROWS) if isinstance(rows, dict) else rows,
                                   lookups_per_sample=hotness.get(c.name, n_features or 1),
                                   pooling="sum" if c.name in hotness or not n_features else None, sharding=sharding)
             for c in configs]
    if sharding in HOST_KINDS:
        return plan_hosts(specs, world_size, local_ranks or world_size, sharding, max(batch_size, world_size), codec,
                          device_bytes)
    return plan_tables(specs, [RankBudget(device_bytes)] * world_size, max(batch_size, world_size), codec,
                       local_ranks=local_ranks, **planner)
