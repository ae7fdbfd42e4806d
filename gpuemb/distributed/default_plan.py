"""A plan for a collection's tables when none is given: the sharding planner over equal ranks."""
from gpuemb.sharding import RankBudget, TableSpec, plan_tables

DEFAULT_ROWS = 1 << 20
DEFAULT_DEVICE_BYTES = 16 << 30


def plan_for(configs, world_size, n_features=None, rows=DEFAULT_ROWS, device_bytes=DEFAULT_DEVICE_BYTES,
             batch_size=65536, codec="fp32", sharding="auto", **planner):
    """``plan_tables`` of the table ``configs`` over ``world_size`` ranks of ``device_bytes`` each.

    ``rows``: the keys each table is expected to hold (an int, or ``{name: rows}``); a table shared by
    ``n_features`` features is looked up that many times a sample. ``planner``: more ``plan_tables`` arguments
    (``dp_max_bytes``, ``cache_fraction``).
    """
    specs = [TableSpec.from_config(c, rows.get(c.name, DEFAULT_ROWS) if isinstance(rows, dict) else rows,
                                   lookups_per_sample=n_features or 1, sharding=sharding) for c in configs]
    return plan_tables(specs, [RankBudget(device_bytes)] * world_size, max(batch_size, world_size), codec, **planner)
