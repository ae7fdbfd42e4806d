"""The plan: where each table's shards live, and which rank owns a key.

A ``Plan`` holds one ``Placement`` per table: its kind and its ``Shard``s. Each shard has a rank, the rows it is
expected to hold, its weight columns ``[start, stop)``, its home tier and, over a host or ssd home, the rows of its
device cache. Kinds:

- ``table``: one shard, all rows and columns, on one rank;
- ``row``: one shard per rank; rank ``r`` holds the keys whose ``owner_hash(key) % world_size == r``;
- ``column``: shards of all rows, each a range of the columns, on distinct ranks;
- ``data``: a full replica on every rank, the gradients allreduced;
- ``table_row``: row-wise over the ranks of one host: rank ``host·L + i`` of its ``L`` local ranks holds the keys
  whose ``owner_hash(key) % L`` is its shard's residue;
- ``grid``: column shards of row shards: each column range of the table is row-wise over one host's ranks.

Every kind is one rule: a table's shards group by their columns, and each column range's shards, by residue, own
its keys by ``owner_hash(key) % (shards of the range)`` (a range of one shard owns them all). ``local_ranks`` is
the ranks of a host, the hosts holding ranks ``[h·L, (h + 1)·L)``; a plan with ``table_row`` or ``grid``
placements states it.

``to_json()``/``from_json()`` round-trip the decisions; the JSON also carries each rank's estimated costs
(``cost.rank_costs``), to read, and ``from_json`` ignores them. ``load_plan`` reads such a file for a run
(``tools/train.py --plan``, ``tools/plan.py --plan``): checked for the run's world size and tables, and refused in
one line that names the file.
"""
import json
import reprlib
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.checks import fail, is_int
from gpuemb.io.hashing import mix_array

from .cost import CODEC_BYTES, HOMES, rank_costs
from .spec import RankBudget, TableSpec

KINDS = ("table", "row", "column", "data", "table_row", "grid")
HOST_KINDS = ("table_row", "grid")  # kinds whose row shards live on one host
OWNER_SLOT = 0x5AD  # owner_hash's salt: any slot works as long as the row-wise owners all use the same one


def owner_hash(keys):
    """The non-negative 63-bit hash of int64 ``keys`` that picks their row-wise shard.

    It is ``io.hashing``'s splitmix64 mix with a slot of its own. It must differ from the key index's probe hash
    (splitmix64's finaliser of the bare key): with the same hash, the keys of rank ``r`` would agree in the bits
    that chose their owner and crowd into part of that rank's index.
    """
    return mix_array(np.ascontiguousarray(keys, np.int64).view(np.uint64), OWNER_SLOT)


def owner_among(ranks, keys):
    """The owner of each of ``keys`` among ``ranks`` (a column range's shards, by residue): ``[n]``."""
    ranks = np.asarray(ranks, np.int64)
    if ranks.size == 1:
        return np.full(np.shape(keys), ranks[0])
    return ranks[owner_hash(keys) % ranks.size]


@dataclass(frozen=True)
class Shard:
    """A piece of a table on ``rank``: ``rows`` keys (expected), weight columns ``cols = (start, stop)``, homed in
    ``home`` under a device cache of ``cache_rows``; ``residue`` is the hash residue of a row-wise shard."""
    rank: int
    rows: int
    cols: tuple
    home: str = "device"
    cache_rows: int = 0
    residue: int = None


@dataclass(frozen=True)
class Placement:
    """How table ``table`` (a ``TableSpec``) is sharded, and why the planner chose it."""
    table: TableSpec
    kind: str
    shards: tuple
    reason: str = ""


@dataclass(frozen=True)
class Plan:
    """Every table's placement over ``len(budgets)`` ranks, for steps of ``batch_size`` samples (global) whose
    embedding all-to-alls use ``codec``; ``local_ranks``: the ranks of a host (None: not stated)."""
    budgets: tuple
    placements: tuple
    batch_size: int
    codec: str
    local_ranks: int = None

    def __post_init__(self):
        _check(self)

    @property
    def world_size(self):
        return len(self.budgets)

    def placement(self, table):
        """The placement of the table named ``table``."""
        for p in self.placements:
            if p.table.name == table:
                return p
        raise KeyError(f"Plan: no table {table!r}; it has {', '.join(p.table.name for p in self.placements)}")

    def owner_of(self, table, keys):
        """The rank owning each of ``keys`` (int64) of ``table``: ``[n]``, or ``[n, S]`` for a column-wise or grid
        table (one rank per column range of ``owners``). A data-parallel table has no owner: every rank holds it."""
        p = self.placement(table)
        keys = np.asarray(keys, np.int64)
        if p.kind == "data":
            raise ValueError(f"Plan.owner_of: {table!r} is data-parallel, so every rank looks its keys up locally")
        by_range = [owner_among(ranks, keys) for _, ranks in self.owners(table)]
        return np.stack(by_range, axis=-1) if p.kind in ("column", "grid") else by_range[0]

    def owners(self, table):
        """``[(cols, ranks)]``: each column range of ``table``, in column order, and the ranks of its shards by
        residue, among which ``owner_among`` picks a key's owner."""
        ranges = {}
        for s in self.placement(table).shards:
            ranges.setdefault(tuple(s.cols), []).append(s)
        return [(cols, tuple(s.rank for s in sorted(shards, key=lambda s: s.residue or 0)))
                for cols, shards in sorted(ranges.items())]

    def column_ranges(self, table):
        """``[(rank, start, stop), ...]``: which rank holds which weight columns of ``table``, in column order."""
        return sorted(((s.rank, *s.cols) for s in self.placement(table).shards), key=lambda r: r[1])

    def to_json(self, indent=1):
        costs = rank_costs(self)
        return json.dumps({
            "world_size": self.world_size, "batch_size": self.batch_size, "codec": self.codec,
            "local_ranks": self.local_ranks,
            "budgets": [b.to_dict() for b in self.budgets],
            "placements": [{"table": p.table.to_dict(), "kind": p.kind, "reason": p.reason,
                            "shards": [vars(s) for s in p.shards]} for p in self.placements],
            "ranks": [{"memory": vars(c.memory), "lookup": c.lookup, "a2a_fwd": c.a2a_fwd, "a2a_bwd": c.a2a_bwd,
                       "allreduce": c.allreduce, "shards": c.shards} for c in costs],
        }, indent=indent)

    @classmethod
    def from_json(cls, text):
        """The plan ``to_json`` wrote (its ``ranks`` costs are derived, so they are not read); ValueError for
        anything else, however malformed."""
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser's stack
            raise ValueError(f"Plan.from_json: not JSON ({type(e).__name__}: {e}); give the JSON that "
                             "Plan.to_json() (tools/plan.py --json) wrote") from None
        try:
            placements = tuple(
                Placement(TableSpec.from_dict(p["table"]), p["kind"],
                          tuple(Shard(**{**s, "cols": tuple(s["cols"])}) for s in p["shards"]), p.get("reason", ""))
                for p in d["placements"])
            return cls(tuple(RankBudget.from_dict(b) for b in d["budgets"]), placements, d["batch_size"], d["codec"],
                       d.get("local_ranks"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"Plan.from_json: not a plan ({type(e).__name__}: {e}); give the JSON that "
                             "Plan.to_json() (tools/plan.py --json) wrote") from e


def load_plan(path, world_size=0, tables=None, world="--world-size"):
    """The plan that ``tools/plan.py --json`` wrote to ``path``, checked against the run it is for; else a
    ValueError of one line that names the file and says what to do.

    world_size: the ranks it must be for (0: any), which the caller sets by ``world`` (``--world-size``,
    ``mpiexec -n``); tables: the tables it must place, exactly (objects with ``name`` and ``dim``; None: any).
    """
    where = f"--plan {path}"
    try:
        with open(path, encoding="utf-8") as f:
            plan = Plan.from_json(f.read())
    except OSError as e:
        raise ValueError(f"{where}: cannot read it ({e.strerror or e}); write one with tools/plan.py --json") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not text ({e.reason} at byte {e.start}); give the JSON that tools/plan.py --json "
                         "wrote") from None
    except ValueError as e:  # not JSON, or not a plan: the message says which
        raise ValueError(f"{where}: {e}") from None
    if world_size and plan.world_size != world_size:
        raise ValueError(f"{where} is for {plan.world_size} ranks, not {world} {world_size}; plan again for the "
                         "world you run in")
    if tables is not None:
        _check_tables(plan, where, tables)
    return plan


def _check_tables(plan, where, tables):
    """Raise ValueError unless ``plan`` places exactly ``tables``, each at its dim."""
    dims = {t.name: t.dim for t in tables}
    planned = {p.table.name: p.table.dim for p in plan.placements}
    missing, extra = [n for n in dims if n not in planned], [n for n in planned if n not in dims]
    if missing or extra:
        says = "; ".join(s for s in (missing and f"it has no table {_names(missing)}",
                                     extra and f"the model has no table {_names(extra)}") if s)
        raise ValueError(f"{where}: {says}; plan exactly the model's tables ({_names(list(dims))}), with "
                         "tools/plan.py --config")
    for name, dim in dims.items():
        if planned[name] != dim:
            raise ValueError(f"{where}: table {name} has dim {dim} in the model but {planned[name]} in the plan; "
                             "plan each table at its dim")


def _names(names, most=8):
    """``names`` joined, the first ``most`` of them where there are more, each cut short (a file's may be long)."""
    shown = [n if len(n) <= 40 else n[:37] + "..." for n in names[:most]]
    return ", ".join(shown) + (f" and {len(names) - most} more" if len(names) > most else "")


def _check(plan):
    """Raise ValueError naming the first thing in ``plan`` that no planner would write."""
    W = plan.world_size
    if W < 1 or not all(isinstance(b, RankBudget) for b in plan.budgets):
        fail("Plan: budgets", "give one RankBudget per rank")
    if plan.codec not in CODEC_BYTES:
        fail("Plan: codec", f"{plan.codec!r}; use one of {', '.join(CODEC_BYTES)}")
    if plan.local_ranks is not None and (not is_int(plan.local_ranks, 1) or W % plan.local_ranks):
        fail("Plan: local_ranks", f"{plan.local_ranks!r} ranks a host do not divide the {W} ranks; give the ranks "
                                  "of one host, a divisor of the world size")
    if not is_int(plan.batch_size, 1):
        fail("Plan: batch_size", f"{plan.batch_size!r}; use an int >= 1 (samples per step over all ranks)")
    names = [p.table.name for p in plan.placements]
    if len(set(names)) != len(names):
        fail("Plan: placements", f"table names repeat in {names}; give each table one placement")
    for p in plan.placements:
        where = f"Plan: table {reprlib.repr(p.table.name)}"
        if p.kind not in KINDS:
            fail(where, f"kind {p.kind!r}; use one of {', '.join(KINDS)}")
        if not p.shards:
            fail(where, "no shards")
        for s in p.shards:
            _check_fields(s, where)
            if not 0 <= s.rank < W or s.home not in HOMES or not 0 <= s.cols[0] < s.cols[1] <= p.table.dim:
                fail(where, f"{_shown(s)} needs a rank in [0, {W}), a home in {HOMES} and columns within "
                            f"[0, {p.table.dim})")
        _check_kind(plan, p, where)


def _check_fields(shard, where):
    """Raise ValueError unless ``shard``'s fields have their types: a plan read from a file may hold anything."""
    cols = shard.cols
    if not (is_int(shard.rank) and is_int(shard.rows, 0) and is_int(shard.cache_rows, 0)
            and (shard.residue is None or is_int(shard.residue, 0))
            and isinstance(cols, tuple) and len(cols) == 2 and all(is_int(c) for c in cols)):
        fail(where, f"{_shown(shard)} needs an int rank, int rows and cache_rows >= 0, an int residue >= 0 or none, "
                    "and columns [start, stop) as two ints")


def _shown(shard):
    """``shard`` as its repr, each field cut short: a plan from a file may hold a number of a thousand digits."""
    return f"Shard({', '.join(f'{k}={reprlib.repr(v)}' for k, v in vars(shard).items())})"


def _check_kind(plan, p, where):
    """Raise ValueError unless placement ``p``'s shards are what its kind lays out."""
    W = plan.world_size
    ranks = [s.rank for s in p.shards]
    ranges = sorted({tuple(s.cols) for s in p.shards})
    if p.kind in ("column", "grid") and (ranges[0][0] != 0 or ranges[-1][1] != p.table.dim
                                         or any(a[1] != b[0] for a, b in zip(ranges, ranges[1:]))):
        fail(where, f"column ranges {ranges} must tile [0, {p.table.dim}) exactly")
    if p.kind not in ("column", "grid") and ranges != [(0, p.table.dim)]:
        fail(where, f"a {p.kind}-wise shard holds every column; got {ranges}")
    if p.kind in ("row", "data") and sorted(ranks) != list(range(W)):
        fail(where, f"a {p.kind} placement has one shard on every rank; got ranks {ranks}")
    if p.kind == "table" and len(p.shards) != 1:
        fail(where, f"a table-wise placement has one shard; got {len(p.shards)}")
    if len(set(ranks)) != len(ranks):
        fail(where, f"a {p.kind} placement's shards go to distinct ranks; got {ranks}")
    by_range = [[s for s in p.shards if tuple(s.cols) == c] for c in ranges]
    if p.kind == "row" and sorted(_residue(s) for s in p.shards) != list(range(W)):
        fail(where, f"row-wise residues must be 0..{W - 1}, one per shard")
    if p.kind == "column" and any(len(shards) != 1 for shards in by_range):
        fail(where, "a column-wise placement has one shard per column range; for row shards of each use 'grid'")
    if p.kind in HOST_KINDS:
        _check_hosts(plan, p, where, by_range)


def _residue(shard):
    return shard.residue if isinstance(shard.residue, int) else -1


def _check_hosts(plan, p, where, by_range):
    """A table_row or grid placement: each column range row-wise over every rank of one host."""
    W, L = plan.world_size, plan.local_ranks
    if not isinstance(L, int) or L < 1 or W % L:
        fail(where, f"a {p.kind} placement needs the plan's local_ranks, ranks a host, dividing the {W} ranks; "
                    f"got {L!r}")
    for shards in by_range:
        hosts = sorted({s.rank // L for s in shards})
        if len(hosts) != 1 or len(shards) != L or sorted(_residue(s) for s in shards) != list(range(L)):
            fail(where, f"columns {shards[0].cols} are row-wise over ranks {[s.rank for s in shards]}; a {p.kind} "
                        f"placement spreads each column range over the {L} ranks of one host, residues 0..{L - 1}")
