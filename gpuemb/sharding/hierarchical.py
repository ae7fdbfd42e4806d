"""The 2-D placements, hosts as the second axis (ZionEX/Neo's hierarchical sharding, TorchRec's table-row-wise and
grid): ``table_row`` spreads a table's rows over the ranks of one host, the tables over the hosts; ``grid`` splits
a table's columns over the hosts and spreads each column range's rows over its host's ranks.

A host holds ranks ``[h·L, (h + 1)·L)`` of ``L = local_ranks``. Row shards within a host keep a lookup's keys and
rows on the host's fast links where a requester is on it, and a table's memory is split ``L`` ways without every
rank of the world taking part in its all-to-all.

Costs: a column range row-wise over ``L`` ranks costs what a row-wise table of those ranks costs, a share ``1/L``
of the keys each (``host_placement_costs``), so a planner weighs these kinds with the same model as the others.
Pooled bags of keyed tables, these and row-wise ones, go by the two-level exchange over several hosts
(``gpuemb/distributed/host_relay.py``), and their rows' bytes are counted as they travel: a partial to the
requester's relay on the owner's host, one vector a bag across, and 8 bytes of recipe a relayed sub-bag with the
keys (``costs_on_hosts``).
"""
from dataclasses import replace

from .cost import KEY_BYTES, RECIPE_BYTES, RankCost, length_bytes, placement_costs, vector_bytes
from .plan import HOST_KINDS, Placement, Plan, Shard
from .spec import RankBudget


def check_hosts(world_size, local_ranks, owner="local_ranks"):
    """The number of hosts; ValueError, one line, where ``local_ranks`` does not divide ``world_size``."""
    if not isinstance(local_ranks, int) or isinstance(local_ranks, bool) or local_ranks < 1 \
            or world_size % local_ranks:
        raise ValueError(f"{owner}: {local_ranks!r} ranks a host do not divide the {world_size} ranks; give the "
                         f"ranks of one host, a divisor of {world_size}")
    return world_size // local_ranks


def relay_hosts(local_ranks, world_size):
    """The ranks of a host where keyed partials of bags go by relay, combined within a host before they cross
    (``gpuemb/distributed/host_relay.py``), else None: ``local_ranks`` (a plan's, None where it states no hosts)
    where it makes more than one host of more than one rank."""
    return local_ranks if local_ranks is not None and 1 < local_ranks < world_size else None


def column_split(dim, n, name="table"):
    """``n`` column ranges tiling ``[0, dim)`` that differ in width by at most one column."""
    if n > dim:
        raise ValueError(f"grid: table {name!r} of dim {dim} cannot split its columns over {n} hosts; give it a dim "
                         f">= {n}, fewer hosts (more local ranks), or shard it table_row")
    edges = [dim * i // n for i in range(n + 1)]
    return list(zip(edges, edges[1:]))


def _row_shards(spec, host, local_ranks, cols):
    """The rows of ``spec`` over host ``host``'s ranks, partitioned as row-wise partitions them over the world: the
    first ``rows % local_ranks`` residues hold one more."""
    first, (share, extra) = host * local_ranks, divmod(spec.rows, local_ranks)
    return [Shard(first + i, share + (i < extra), cols, residue=i) for i in range(local_ranks)]


def table_row_placement(spec, host, local_ranks, reason=""):
    """``spec``'s rows over the ``local_ranks`` ranks of host ``host``."""
    shards = _row_shards(spec, host, local_ranks, (0, spec.dim))
    return Placement(spec, "table_row", tuple(shards), reason or f"row-wise over host {host}'s {local_ranks} ranks")


def grid_placement(spec, world_size, local_ranks, reason=""):
    """``spec``'s columns over the hosts, each column range's rows over its host's ranks."""
    hosts = check_hosts(world_size, local_ranks)
    shards = [s for h, cols in enumerate(column_split(spec.dim, hosts, spec.name))
              for s in _row_shards(spec, h, local_ranks, cols)]
    return Placement(spec, "grid", tuple(shards),
                     reason or f"{hosts} column ranges over the hosts, each row-wise over its {local_ranks} ranks")


def host_placement_costs(placement, world_size, batch_size, codec, local_ranks=None):
    """The ``RankCost`` per rank (a list of ``world_size``) of a ``table_row`` or ``grid`` placement, or of a
    ``row`` one in a plan of hosts of ``local_ranks``: the sum over its column ranges of a row-wise table of that
    range's ranks; pooled over several hosts, with the rows' bytes of the two-level exchange (``relayed_bytes``).
    A 2-D placement's range holds one host, so its ranks are the host's when ``local_ranks`` is not given."""
    totals = [RankCost() for _ in range(world_size)]
    for cols in sorted({s.cols for s in placement.shards}):
        shards = tuple(s for s in placement.shards if s.cols == cols)
        costs = placement_costs(Placement(placement.table, "row", shards), world_size, batch_size, codec)
        L = local_ranks or len(shards)
        if placement.table.pooling is not None and 1 < L < world_size:
            fwd, bwd = relayed_bytes(placement.table, shards, world_size, L, batch_size / world_size, codec)
            costs = [replace(c, a2a_fwd=f, a2a_bwd=g) for c, f, g in zip(costs, fwd, bwd)]
        totals = [t + c for t, c in zip(totals, costs)]
    return totals


def costs_on_hosts(placement, world_size, batch_size, codec, local_ranks=None):
    """The ``RankCost`` per rank of any placement in a plan of hosts of ``local_ranks`` (None: not stated), as the
    exchange sends it: keyed placements (row-wise and 2-D) by ``host_placement_costs``, the rest by
    ``placement_costs``. The planner and ``cost.rank_costs`` both price a placement here."""
    if placement.kind in HOST_KINDS or (placement.kind == "row" and local_ranks is not None):
        return host_placement_costs(placement, world_size, batch_size, codec, local_ranks)
    return placement_costs(placement, world_size, batch_size, codec)


def relayed_bytes(spec, shards, world_size, local_ranks, b, codec):
    """``(a2a_fwd, a2a_bwd)``, lists of bytes per rank, of a column range row-wise over ``shards`` (a share
    ``1/n`` of the keys each, on one host or several) whose pooled bags go by the relay: each requester sends its
    keys (``a2a_fwd``) to the owners and the recipe of its sub-bags to its relay on each owner's host elsewhere; an
    owner sends its partials to the requester, or to its relay; each relay sends one vector a bag with a key on its
    host to each requester of its local rank elsewhere; the gradients go back the same ways (``a2a_bwd``)."""
    W, L, n = world_size, local_ranks, len(shards)
    lookups, q = spec.lookups_per_sample, 1 / n
    v = vector_bytes(shards[0].cols[1] - shards[0].cols[0], codec)
    m = min(b * lookups * q, b * (1 - (1 - q) ** lookups))  # the sub-bags an owner gets from a requester
    fwd, bwd = [0.0] * W, [0.0] * W
    for s in shards:
        h = s.rank // L
        for i in range(W):
            if i == s.rank:
                continue
            relay = i if i // L == h else h * L + i % L
            fwd[i] += b * lookups * q * KEY_BYTES + m * length_bytes(spec) + (m * RECIPE_BYTES if relay != i else 0)
            if relay != s.rank:
                fwd[s.rank] += m * v
                bwd[relay] += m * v
    for h in sorted({s.rank // L for s in shards}):
        share = sum(s.rank // L == h for s in shards) * q
        bags = min(b * lookups * share, b * (1 - (1 - share) ** lookups))  # the bags with a key on host h
        for i in range(W):
            if i // L != h:
                fwd[h * L + i % L] += bags * v
                bwd[i] += bags * v
    return fwd, bwd


def plan_hosts(specs, world_size, local_ranks, kind, batch_size=65536, codec="fp32", device_bytes=16 << 30):
    """A ``Plan`` of every table in ``specs`` placed ``kind`` (``table_row`` or ``grid``) over ``world_size`` ranks
    of ``local_ranks`` a host. Table-row-wise, the tables go largest first to the host with the fewest bytes of
    rows so far."""
    if kind not in HOST_KINDS:
        raise ValueError(f"plan_hosts: kind={kind!r}; use one of {', '.join(HOST_KINDS)}")
    hosts = check_hosts(world_size, local_ranks)
    placements, load = {}, [0] * hosts
    for spec in sorted(specs, key=lambda s: -s.rows * s.row_width() * s.itemsize):
        if kind == "grid":
            placements[spec.name] = grid_placement(spec, world_size, local_ranks)
            continue
        host = min(range(hosts), key=lambda h: (load[h], h))
        load[host] += spec.rows * spec.row_width() * spec.itemsize
        placements[spec.name] = table_row_placement(spec, host, local_ranks)
    return Plan((RankBudget(device_bytes),) * world_size, tuple(placements[s.name] for s in specs), batch_size,
                codec, local_ranks)
