"""The greedy planner: tables and per-rank budgets in, a ``Plan`` out, or a ``PlanError`` that says what to change.

The rules, in order:

1. Data-parallel: a table whose full replica (rows, index) is at most ``dp_max_bytes`` is copied to every rank, if
   every rank's device has room (docs/sharding.md weighs its allreduce against the all-to-alls it saves).
2. The rest go largest first (device bytes of the whole table), each onto the least loaded rank (``RankCost.load``,
   bytes moved per step; ties go to the rank with less device memory in use):
   - column-wise when asked for, or when ``dim >= COLUMN_MIN_DIM`` and ``rows <= COLUMN_MAX_ROWS``: the columns
     split into ``min(W, dim, max(2, ceil(dim / COLUMN_WIDTH)))`` near-equal ranges on distinct ranks. Few rows
     make the per-shard index cheap to repeat, and every shard sees every key, so hot keys cannot skew it. Over
     several hosts, grid instead (a column range a host, each row-wise over its host's ranks) where its shards fit
     and its step is estimated faster (``_faster_over_hosts``);
   - table-wise on the least loaded rank whose device holds it;
   - row-wise, one shard per rank by key hash, when no rank's device holds it but every rank holds its share;
     over several hosts (``local_ranks`` < W), table-row-wise instead (rows over the ranks of the least loaded
     host whose devices hold them), or grid for a table that would have gone column-wise, where that step is
     estimated faster (``_faster_over_hosts``);
   - then the same two again with tiers: a shard that does not fit a rank's device is homed in host memory, else
     on ssd, under a device cache. The cache takes at least the unique rows of ``PREFETCH_BATCHES`` batches (the
     batch being trained and the one prefetched) and at most ``cache_fraction`` of the rows, and while tables are
     still to come it leaves each rank their mean device bytes, so an early cache cannot crowd the later tables
     onto one rank. Once every table is placed, the device memory left on a rank grows its caches, up to
     ``cache_fraction``.
3. In that order, a table asked for table_row or grid goes so, its shards on device (table_row on the least
   loaded host whose devices hold them), or ``PlanError`` says why not: the ranks are one host, the dim is
   narrower than the hosts, or the shards do not fit.
4. When none of these fits, ``PlanError`` names the table, its bytes and the budget, and lists what to change.
"""
import dataclasses
import math

from gpuemb.autograd.checks import fail

from gpuemb.comm.link import PRESETS as LINKS

from .cost import (CODEC_BYTES, DEVICE_KEY_BYTES, HOMES, Memory, RankCost, human_bytes, row_bytes, shard_memory,
                   unique_rows)
from .estimate import estimate_step
from .hierarchical import check_hosts, costs_on_hosts, grid_placement, relay_hosts, table_row_placement
from .plan import HOST_KINDS, Placement, Plan, Shard
from .profile import PROFILES
from .spec import RankBudget, TableSpec

COLUMN_MIN_DIM = 512
COLUMN_MAX_ROWS = 1 << 20
COLUMN_WIDTH = 128
PREFETCH_BATCHES = 2
# what the planner weighs table_row against row-wise with: hosts joined by HDR100 InfiniBand, NVLink within one
HOST_LINK, LOCAL_LINK, PROFILE = LINKS["ib100"], LINKS["nvlink4"], PROFILES["h200"]


class PlanError(ValueError):
    """No placement fits the budgets; the message says what to change."""


class _Ranks:
    """The planner's running state: each rank's free memory and its cost so far."""

    def __init__(self, budgets, batch_size, codec, cache_fraction, local_ranks=None):
        self.budgets, self.batch_size, self.codec, self.cache_fraction = budgets, batch_size, codec, cache_fraction
        self.W, self.local_ranks = len(budgets), local_ranks or len(budgets)
        self.free = [Memory(b.device_bytes, b.host_bytes, b.ssd_bytes) for b in budgets]
        self.cost = [RankCost() for _ in budgets]
        self.reserve = 0  # device bytes per rank that caches leave for the tables still to come

    def by_load(self):
        """Ranks, least loaded first."""
        return sorted(range(self.W), key=lambda r: (self.cost[r].load, self.cost[r].memory.device, r))

    def commit(self, placement):
        if placement is None:
            return None
        hosts = relay_hosts(self.local_ranks, self.W)
        for r, c in enumerate(costs_on_hosts(placement, self.W, self.batch_size, self.codec, hosts)):
            self.cost[r] += c
            self.free[r] -= c.memory
        return placement

    def fit(self, spec, rows, cols, share, rank, homes):
        """``(home, cache_rows)`` of the first of ``homes`` where ``rows`` keys of ``cols`` columns fit ``rank``."""
        free = self.free[rank]
        for home in homes:
            if home == "device":
                if shard_memory(spec, rows, cols).fits(free):
                    return "device", 0
                continue
            need = min(rows, math.ceil(PREFETCH_BATCHES * unique_rows(spec, share, rows, self.batch_size)))
            want = min(rows, max(need, math.ceil(self.cache_fraction * rows)))
            per_row = row_bytes(spec, cols) + DEVICE_KEY_BYTES
            cache = max(need, min(want, int((free.device - self.reserve) // per_row)))
            if shard_memory(spec, rows, cols, home, cache).fits(free):
                return home, cache
        return None


def _tiered(shards):
    """What a reason adds for shards homed below the device."""
    below = [s for s in shards if s.home != "device"]
    if not below:
        return ""
    homes = " and ".join(sorted({s.home for s in below}))
    if len(shards) == 1:
        return f", homed in {homes} under a device cache"
    return f"; {len(below)} of its {len(shards)} shards homed in {homes} under device caches"


def _data(st, spec):
    mem = shard_memory(spec, spec.rows)
    if not all(mem.fits(f) for f in st.free):
        return None
    shards = tuple(Shard(r, spec.rows, (0, spec.dim)) for r in range(st.W))
    why = f"data-parallel: a {human_bytes(mem.device)} replica on every rank"
    return st.commit(Placement(spec, "data", shards, why))


def _least_loaded(st, spec, cols, homes, exclude=()):
    """``(rank, home, cache_rows)`` for all rows of ``cols`` columns of ``spec``: a device home on any rank before a
    cache on the least loaded one, and so on down ``homes``; None where no rank outside ``exclude`` has room."""
    for home in homes:
        for r in st.by_load():
            fit = None if r in exclude else st.fit(spec, spec.rows, cols, 1.0, r, (home,))
            if fit:
                return (r, *fit)
    return None


def _table(st, spec, homes):
    found = _least_loaded(st, spec, spec.dim, homes)
    if found is None:
        return None
    shard = Shard(found[0], spec.rows, (0, spec.dim), *found[1:])
    why = f"table-wise on rank {shard.rank}, the least loaded with room{_tiered([shard])}"
    return st.commit(Placement(spec, "table", (shard,), why))


def _row(st, spec, homes):
    """The row-wise placement of ``spec`` over every rank, not yet committed; None where a share does not fit."""
    shards = []
    for r in range(st.W):
        rows = spec.rows // st.W + (r < spec.rows % st.W)
        fit = st.fit(spec, rows, spec.dim, 1 / st.W, r, homes)
        if not fit:
            return None
        shards.append(Shard(r, rows, (0, spec.dim), *fit, residue=r))
    why = f"row-wise over {st.W} ranks by key hash: " + (
        "as asked" if spec.sharding == "row" else
        f"no rank has room for all {human_bytes(shard_memory(spec, spec.rows).device)}") + _tiered(shards)
    return Placement(spec, "row", tuple(shards), why)


def _on_devices(st, placement):
    """``placement`` where the device of each of its shards' ranks holds the shard, else None."""
    spec = placement.table
    fits = all(shard_memory(spec, s.rows, s.cols[1] - s.cols[0]).fits(st.free[s.rank]) for s in placement.shards)
    return placement if fits else None


def _table_rows(st, spec):
    """``spec`` row-wise over the ranks of each host, the least loaded host first."""
    L = st.local_ranks
    load = [sum(st.cost[r].load for r in range(h * L, (h + 1) * L)) for h in range(st.W // L)]
    return [table_row_placement(spec, h, L) for h in sorted(range(st.W // L), key=lambda h: (load[h], h))]


def _first_on_devices(st, placements):
    """The first of ``placements`` whose shards the devices hold, else None."""
    return next((p for p in placements if _on_devices(st, p)), None)


def _table_row(st, spec):
    """``spec`` row-wise over the ranks of the least loaded host whose devices hold its shards, not yet committed;
    None where no host has room."""
    return _first_on_devices(st, _table_rows(st, spec))


def _grid(st, spec):
    """``spec``'s columns over the hosts, each range row-wise over its host's ranks, not yet committed; None where a
    shard does not fit its rank's device or the dim is narrower than the hosts."""
    if spec.dim < st.W // st.local_ranks:
        return None
    return _on_devices(st, grid_placement(spec, st.W, st.local_ranks))


def _no_room_over_hosts(st, spec, placements):
    """The PlanError of an asked-for table_row or grid ``spec`` none of whose ``placements`` the devices hold: the
    shard nearest to fitting in the placement nearest to fitting, what it needs and what its rank has."""
    def spare(s):
        return st.free[s.rank].device - shard_memory(spec, s.rows, s.cols[1] - s.cols[0]).device

    s = max((min(p.shards, key=spare) for p in placements), key=spare)
    need = shard_memory(spec, s.rows, s.cols[1] - s.cols[0]).device
    fewer = (f"more ranks a host (local_ranks), or sharding='row' over all {st.W} ranks, so each holds fewer rows"
             if spec.sharding == "table_row" else "more ranks, so each holds fewer of its rows and columns")
    return PlanError(
        f"cannot place table {spec.name!r} ({spec.rows} rows x dim {spec.dim}, sharding={spec.sharding!r}): its "
        f"shard on rank {s.rank} ({s.rows} rows x {s.cols[1] - s.cols[0]} columns) needs {human_bytes(need)} of "
        f"device and the rank has {human_bytes(st.free[s.rank].device)} free. Change one of: a larger device budget "
        f"(RankBudget device_bytes, at least {human_bytes(need)} a rank for this shard alone); {fewer}; "
        "sharding='auto', which can home shards in host or ssd memory under a device cache")


def _asked_over_hosts(st, spec):
    """``spec`` placed table_row (on the least loaded host with room) or grid, as its ``sharding`` asks, not yet
    committed; PlanError, one line, where the ranks are one host, the dim is narrower than the hosts or the
    devices cannot hold the shards (the 2-D kinds are not tiered)."""
    kind, W, L = spec.sharding, st.W, st.local_ranks
    if L == W:
        raise PlanError(f"cannot place table {spec.name!r} {kind}: it spreads over hosts, and all {W} ranks are on "
                        f"one; pass local_ranks, the ranks of a host (a divisor of {W} below it; tools/plan.py "
                        "--local-ranks), or shard it 'row' or 'column'")
    try:
        placements = _table_rows(st, spec) if kind == "table_row" else [grid_placement(spec, W, L)]
    except ValueError as e:  # a dim narrower than the hosts: hierarchical.py's own line
        raise PlanError(str(e)) from None
    placed = _first_on_devices(st, placements)
    if placed is None:
        raise _no_room_over_hosts(st, spec, placements)
    return dataclasses.replace(placed, reason=f"{placed.reason}: as asked")


def _copies(placement, names, W):
    """``placement`` once for each of ``names`` (a copy of its table each), copy ``c`` moved to the ranks ``c·n`` to
    ``c·n + n - 1`` (mod ``W``) in the order of its ``n`` ranks, so that copies of a kind that leaves ranks free
    fill them as the greedy planner's next tables would."""
    ranks = sorted({s.rank for s in placement.shards})
    n = len(ranks)
    return [dataclasses.replace(placement, table=dataclasses.replace(placement.table, name=name),
                                shards=tuple(dataclasses.replace(s, rank=(c * n + ranks.index(s.rank)) % W)
                                             for s in placement.shards))
            for c, name in enumerate(names)]


def _faster_over_hosts(st, flat, others, why):
    """The fastest of ``flat`` (row- or column-wise) and ``others`` (table_row, grid) by the estimated step,
    ``flat`` on a tie; any may be None, and where ``flat`` is, the first of ``others`` that is not. A 2-D choice's
    reason gives ``why`` ``flat``'s kind came up, and the two estimates.

    A table_row table leaves the other hosts' ranks, and a column-wise one the ranks beside its shards, to the
    tables placed after it, which go to the least loaded ranks. So each kind is estimated as copies of the table,
    as many as leave every rank the same number of shards (``_copies``): one table_row copy on each host against
    as many row-wise copies (the tables' lookups then cross between hosts once, not once a host), a grid against
    the column-wise copies that cover the ranks, for the same compute and memory. The estimate (``estimate.py``,
    no skew) puts the hosts on ``HOST_LINK`` and a host's ranks on ``LOCAL_LINK``.
    """
    candidates = [p for p in (flat, *others) if p is not None]
    if flat is None or len(candidates) == 1:
        return candidates[0] if candidates else None
    W, spec = st.W, flat.table
    n = math.lcm(*(W // math.gcd(len({s.rank for s in p.shards}), W) for p in candidates))
    names = [f"{spec.name}@{c}" for c in range(n)]

    def step_s(placement):
        plan = Plan(st.budgets, tuple(_copies(placement, names, W)), st.batch_size, st.codec, st.local_ranks)
        return estimate_step(plan, HOST_LINK, PROFILE, local_link=LOCAL_LINK).step_s

    times = [step_s(p) for p in candidates]
    best = min(range(len(candidates)), key=lambda i: (times[i], i))
    if best == 0:
        return flat
    than = f"row-wise over all {W} ranks" if flat.kind == "row" else f"{flat.kind}-wise in {len(flat.shards)} shards"
    return dataclasses.replace(candidates[best], reason=(
        f"{candidates[best].reason}: {why}, and a step is estimated {times[0] / times[best]:.2f}x faster than {than} "
        f"({times[best] * 1e3:.2f} against {times[0] * 1e3:.2f} ms, as {n} {'copy' if n == 1 else 'copies'})"))


def _column(st, spec, why):
    """``spec``'s columns in near-equal ranges on distinct ranks, not yet committed; None where one does not fit."""
    n = min(st.W, spec.dim, max(2, math.ceil(spec.dim / COLUMN_WIDTH)))
    edges = [spec.dim * i // n for i in range(n + 1)]
    shards = []
    for a, b in zip(edges, edges[1:]):
        found = _least_loaded(st, spec, b - a, HOMES, exclude={s.rank for s in shards})
        if found is None:
            return None
        shards.append(Shard(found[0], spec.rows, (a, b), *found[1:]))
    return Placement(spec, "column", tuple(shards), f"column-wise in {n} shards: {why}{_tiered(shards)}")


def _place(st, spec):
    kind, W = spec.sharding, st.W
    if kind in HOST_KINDS:
        return st.commit(_asked_over_hosts(st, spec))
    wide = spec.dim >= COLUMN_MIN_DIM and spec.rows <= COLUMN_MAX_ROWS
    hosts_ok = kind == "auto" and st.local_ranks < W
    grid = hosts_ok and wide and _grid(st, spec) or None  # a wide table's columns may also split over the hosts
    if kind == "column" or (kind == "auto" and W > 1 and wide):
        why = "as asked" if kind == "column" else f"dim {spec.dim} >= {COLUMN_MIN_DIM} with few rows"
        column = _column(st, spec, why)
        if column or kind == "column":
            return st.commit(_faster_over_hosts(st, column, (grid,), why))
    table_ok, row_ok = kind in ("auto", "table"), kind == "row" or (kind == "auto" and W > 1)
    room = f"no rank has room for all {human_bytes(shard_memory(spec, spec.rows).device)}" + (
        " or a column-wise shard of all its rows" if kind == "auto" and W > 1 and wide else "")
    return ((table_ok and _table(st, spec, ("device",)))
            or (row_ok and st.commit(_faster_over_hosts(st, _row(st, spec, ("device",)),
                                                        (hosts_ok and _table_row(st, spec) or None, grid), room)))
            or (table_ok and _table(st, spec, ("host", "ssd"))) or (row_ok and st.commit(_row(st, spec, HOMES)))
            or None)


def _grow_caches(st, placement):
    """``placement`` with the caches of its shards grown into their rank's free device memory, up to
    ``cache_fraction`` of their rows."""
    shards = []
    for s in placement.shards:
        if s.home != "device":
            per_row = row_bytes(placement.table, s.cols[1] - s.cols[0]) + DEVICE_KEY_BYTES
            more = min(math.ceil(st.cache_fraction * s.rows) - s.cache_rows, int(st.free[s.rank].device // per_row))
            if more > 0:
                st.free[s.rank] -= Memory(device=more * per_row)
                s = dataclasses.replace(s, cache_rows=s.cache_rows + more)
        shards.append(s)
    return dataclasses.replace(placement, shards=tuple(shards))


def _remedies(st, spec, tables):
    """What could make ``spec`` fit, for the PlanError."""
    W, budgets = st.W, st.budgets
    need = sum(shard_memory(t, t.rows).device for t in tables)
    per_rank = max(b.device_bytes + b.host_bytes + b.ssd_bytes for b in budgets)
    share = shard_memory(spec, math.ceil(spec.rows / W)).device
    roomiest = max(range(W), key=lambda r: st.free[r].device)
    out = [f"more ranks (all {len(tables)} tables need about {human_bytes(need)} on device: "
           f"{max(W + 1, math.ceil(need / per_rank))} or more ranks of this budget)",
           f"a larger budget (row-wise this table needs {human_bytes(share)} of device per rank; the roomiest, rank "
           f"{roomiest}, has {human_bytes(st.free[roomiest].device)} left)"]
    if not any(b.host_bytes or b.ssd_bytes for b in budgets):
        out.append("a host or ssd tier (RankBudget host_bytes or ssd_bytes), so a device cache holds only the "
                   "hot rows")
    if spec.dim > 1:
        smaller = dataclasses.replace(spec, dim=spec.dim // 2)
        out.append(f"a smaller dim (dim {smaller.dim}: {human_bytes(shard_memory(smaller, spec.rows).device)})")
    if spec.itemsize > 2:
        half = dataclasses.replace(spec, dtype="float16")
        out.append(f"fp16 rows (dtype='float16': {human_bytes(shard_memory(half, spec.rows).device)})")
    if spec.sharding != "auto":
        out.append(f"sharding='auto' instead of {spec.sharding!r}")
    return out


def _no_fit_error(st, spec, tables):
    device, host, ssd = (human_bytes(sum(getattr(b, f) for b in st.budgets))
                         for f in ("device_bytes", "host_bytes", "ssd_bytes"))
    return PlanError(
        f"cannot place table {spec.name!r} ({spec.rows} rows x dim {spec.dim}, {spec.rule}, {spec.dtype}: "
        f"{human_bytes(shard_memory(spec, spec.rows).device)} with the store's per-key overhead, sharding="
        f"{spec.sharding!r}) in {st.W} ranks' budget of {device} device, {host} host and {ssd} ssd in all "
        f"({human_bytes(sum(f.device for f in st.free))} device still free after the larger tables). "
        "Change one of: " + "; ".join(_remedies(st, spec, tables)))


def _check(tables, budgets, batch_size, codec, dp_max_bytes, cache_fraction):
    owner = "plan_tables"
    if not tables or not all(isinstance(t, TableSpec) for t in tables):
        fail(owner, "tables must be a non-empty list of TableSpec")
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        fail(owner, f"table names repeat ({sorted(n for n in set(names) if names.count(n) > 1)}); give each a "
             "unique name")
    if not budgets or not all(isinstance(b, RankBudget) for b in budgets):
        fail(owner, "budgets must be a non-empty list of RankBudget, one per rank")
    if not isinstance(batch_size, int) or batch_size < len(budgets):
        fail(owner, f"batch_size={batch_size!r}; use an int >= the {len(budgets)} ranks (samples per step, all "
             "ranks)")
    if codec not in CODEC_BYTES:
        fail(owner, f"codec={codec!r}; use one of {', '.join(CODEC_BYTES)}")
    if not isinstance(dp_max_bytes, (int, float)) or dp_max_bytes < 0:
        fail(owner, f"dp_max_bytes={dp_max_bytes!r}; use bytes >= 0 (0 turns data-parallel off)")
    if not (isinstance(cache_fraction, (int, float)) and 0 < cache_fraction <= 1):
        fail(owner, f"cache_fraction={cache_fraction!r}; use a number in (0, 1]")


def plan_tables(tables, budgets, batch_size=65536, codec="fp32", dp_max_bytes=1 << 20, cache_fraction=0.25,
                local_ranks=None):
    """A ``Plan`` of ``tables`` (TableSpecs) over ranks with ``budgets`` (one RankBudget each), for steps of
    ``batch_size`` samples over all ranks whose embedding all-to-alls use ``codec``, on hosts of ``local_ranks``
    ranks each (None: one host); see the module docstring."""
    tables, budgets = list(tables), tuple(budgets)
    _check(tables, budgets, batch_size, codec, dp_max_bytes, cache_fraction)
    if local_ranks is not None:
        check_hosts(len(budgets), local_ranks, "plan_tables: local_ranks")
    st = _Ranks(budgets, batch_size, codec, cache_fraction, local_ranks)
    placed, rest = {}, []
    for t in tables:
        small = t.sharding == "auto" and shard_memory(t, t.rows).device <= dp_max_bytes
        p = _data(st, t) if t.sharding == "data" or small else None
        if p:
            placed[t.name] = p
        elif t.sharding == "data":
            raise _no_fit_error(st, t, tables)
        else:
            rest.append(t)
    pending = {t.name: shard_memory(t, t.rows).device for t in rest}
    for t in sorted(rest, key=lambda t: (-pending[t.name], t.name)):
        del pending[t.name]
        st.reserve = sum(pending.values()) / st.W
        placed[t.name] = _place(st, t)
        if placed[t.name] is None:
            raise _no_fit_error(st, t, tables)
    return Plan(budgets, tuple(_grow_caches(st, placed[t.name]) for t in tables), batch_size, codec, local_ranks)
