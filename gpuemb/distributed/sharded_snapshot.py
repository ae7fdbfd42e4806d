"""Snapshots of a sharded collection that load into another number of ranks, resharded by key.

Saving: each of the N ranks writes one ordinary snapshot file (``store.snapshot``), ``<prefix>.rank<r>-of-<N>.h5``,
holding its shard of each table (keys, rows, update counts); rank 0 alone writes the data-parallel replicas. The
file's meta records, under ``"sharded"``, the save's id (the same in all N files), the rank, N, and each table's
placement kind, weight columns and whole dim.

Loading into M ranks: every rank opens all N files, checks that they are one save's N files and that each table's
config matches (the dim aside, which a column shard narrows), then, for each table it holds under its new plan,
streams the stored chunks of every old shard whose columns meet its own and imports the keys it now owns:
row-wise by ``owner_hash(key) % M`` (table-row-wise and a grid's ranges: among one host's ranks), every key
otherwise. Column shards are joined or split by columns
(``layout.copy_columns``): where a new shard takes columns from several old ones, each key's row is completed
piece by piece. Nothing is staged whole: one stored chunk at a time.

Nothing half-loaded: a first pass reads every chunk it will import and checks its checksums, the ranks agree by
an allreduce that all of them passed, and only then does any rank import; a corrupt or missing file makes every
rank raise a ``SnapshotError`` with its tables left empty.
"""
import os
import uuid

import numpy as np

from gpuemb.comm import LocalCommunicator
from gpuemb.store.snapshot import SnapshotError, check_config, read_snapshot, save_snapshot
from gpuemb.store.snapshot.lifecycle import restore_lifecycle

from .layout import copy_columns, resized
from .routing import KEYED
from .shards import LocalShard


def shard_path(prefix, rank, world_size):
    """The file rank ``rank`` of ``world_size`` writes for ``prefix``."""
    return f"{os.fspath(prefix)}.rank{rank}-of-{world_size}.h5"


def save_sharded(collection, prefix, meta=None, wrap=None):
    """Write this rank's shards of ``collection`` (a ShardedEmbeddingCollection) to ``shard_path(prefix, ...)``
    and return that path; every rank must call it. The files are whole on every rank's return; if any rank
    failed, every rank raises (that rank its own error, the others a ``SnapshotError``). ``wrap(name, table)``:
    what is written in place of each table (a view that checks its rows, say)."""
    collection.settle()  # the last step's row updates, if an overlapped backward still holds them
    comm = collection.comm
    save_id = comm.broadcast(np.frombuffer(uuid.uuid4().bytes, np.uint8).copy(), root=0).tobytes().hex()
    shards = {n: s for n, s in collection.shards.items() if s.kind != "data" or comm.rank == 0}
    dims = {c.name: c.dim for c in collection.configs}  # each table's own: a collection may hold several dims
    info = {n: {"kind": s.kind, "cols": list(s.cols), "dim": dims[n]} for n, s in shards.items()}
    path = shard_path(prefix, comm.rank, comm.world_size)
    sharded = {"id": save_id, "rank": comm.rank, "world_size": comm.world_size, "shards": info}
    wrap = wrap or (lambda name, table: table)
    try:
        save_snapshot({n: wrap(n, s.table) for n, s in shards.items()}, path, meta={**(meta or {}), "sharded": sharded})
        error = None
    except Exception as e:  # raised below, once every rank knows: none may wait for a file that never comes
        error = e
    failed = comm.allreduce(np.array([error is not None], np.int64), tag="snapshot")
    if error is not None:
        raise error
    if failed[0]:
        raise SnapshotError(f"save_sharded: {int(failed[0])} other rank(s) could not write their file of "
                            f"{os.fspath(prefix)} (their errors say why); this save is incomplete")
    return path


def _whole(snap):
    """The ``"sharded"`` meta of a save of one rank, for a snapshot of whole tables that ``save_sharded`` did not
    write (``store.snapshot.save_snapshot`` in one process)."""
    shards = {n: {"kind": "table", "cols": [0, t.config.get("dim")], "dim": t.config.get("dim")}
              for n, t in snap.tables.items()}
    return {"id": f"whole:{snap.path}", "rank": 0, "world_size": 1, "shards": shards}


def _is_count(v, low=0):
    return type(v) is int and v >= low


def _check_mark(path, m):
    """SnapshotError unless ``m``, a file's ``"sharded"`` meta, has the fields and types ``save_sharded`` writes."""
    ok = isinstance(m, dict) and isinstance(m.get("id"), str) and _is_count(m.get("world_size"), 1) \
        and _is_count(m.get("rank")) and m["rank"] < m["world_size"] and isinstance(m.get("shards"), dict)
    ok = ok and all(isinstance(i, dict) and isinstance(i.get("kind"), str) and _is_count(i.get("dim"), 1)
                    and isinstance(i.get("cols"), list) and len(i["cols"]) == 2 and all(map(_is_count, i["cols"]))
                    and i["cols"][0] < i["cols"][1] <= i["dim"] for i in m["shards"].values())
    if not ok:
        raise SnapshotError(f"{path}: its meta's 'sharded' ({str(m)[:80]}) is not what save_sharded writes; the "
                            "file is corrupt, so write the snapshot again")


def _open_save(paths):
    """The N snapshots of one save, by old rank, checked to belong together. One snapshot of whole tables, not
    sharded, is a save of one rank."""
    snaps = [read_snapshot(p) for p in paths]
    if len(snaps) == 1 and not snaps[0].meta.get("sharded"):
        snaps[0].meta["sharded"] = _whole(snaps[0])
    marks = [s.meta.get("sharded") for s in snaps]
    for s, m in zip(snaps, marks):
        if not m:
            raise SnapshotError(f"{s.path}: not a shard of a sharded save (its meta has no 'sharded'); pass the "
                                "files save_sharded wrote")
        _check_mark(s.path, m)
    first = marks[0]
    ranks = sorted(m["rank"] for m in marks)
    if any(m["id"] != first["id"] for m in marks) or ranks != list(range(first["world_size"])):
        found = ", ".join(f"{s.path} (save {m['id'][:8]}, rank {m['rank']} of {m['world_size']})"
                          for s, m in zip(snaps, marks))
        raise SnapshotError(f"load_sharded: the files are not the {first['world_size']} files of one save: {found}; "
                            "pass every rank's file of the same save_sharded call")
    return sorted(snaps, key=lambda s: s.meta["sharded"]["rank"])


def _sources(snaps, shard):
    """``[(SnapshotTable, old cols)]``: the old shards of ``shard``'s table whose columns meet its own."""
    out = []
    for s in snaps:
        info = s.meta["sharded"]["shards"].get(shard.name)
        if info is None:
            continue
        if shard.name not in s.tables:
            raise SnapshotError(f"{s.path}: its meta lists table {shard.name!r} but the file holds no such table; "
                                "the file is corrupt, so write the snapshot again")
        cols = tuple(info["cols"])
        if cols[0] < shard.cols[1] and shard.cols[0] < cols[1]:
            out.append((s.tables[shard.name], cols))
    covered = sorted({c for _, c in out})
    if not out or covered[0][0] > shard.cols[0] or max(c[1] for c in covered) < shard.cols[1]:
        raise SnapshotError(f"load_sharded: no saved shards of table {shard.name!r} cover its columns "
                            f"{shard.cols}; the save holds {covered or 'none'}; pass the files of a save of it")
    for part, _ in out:  # a column shard narrows the dim, and the rows may live elsewhere now
        check_config(part, shard.name, shard.table.config.to_dict(), ignore=("dim",))
    return out


def _owned(collection, shard, keys):
    """The mask of ``keys`` that this rank's ``shard`` holds under the collection's plan."""
    if shard.kind not in KEYED:
        return np.ones(keys.size, bool)
    owners = collection.plan.owner_of(shard.name, keys).reshape(keys.size, -1)  # a grid: one column per range
    return (owners == collection.comm.rank).any(axis=1)  # a rank holds one range of a table


def load_sharded(collection, paths):
    """Fill the fresh (empty) tables of ``collection`` from the N files of a ``save_sharded`` (any order), each
    rank taking the keys and columns its plan gives it. Every rank must call it with the same files."""
    comm = collection.comm
    try:
        snaps = _open_save([os.fspath(p) for p in paths])
        work = []
        for shard in collection.shards.values():
            if len(shard.table):
                raise ValueError(f"load_sharded: table {shard.name!r} already holds {len(shard.table)} keys; load "
                                 "into a freshly built collection")
            work.append((shard, _sources(snaps, shard)))
        for _, sources in work:
            for part, _ in sources:
                for _ in part.chunks():  # checks every chunk's checksums, keeping nothing
                    pass
                part.extra("pending"), part.extra("ticks")
        error = None
    except (SnapshotError, ValueError, OSError) as e:
        error = e
    failed = comm.allreduce(np.array([error is not None], np.int64))
    if error is not None:
        raise error
    if failed[0]:
        raise SnapshotError(f"load_sharded: {int(failed[0])} other rank(s) could not read or check their part of "
                            f"{[os.fspath(p) for p in paths]} (their errors name the file); nothing was loaded")
    ranks = {s.path: s.meta["sharded"]["rank"] for s in snaps}
    same_world = snaps[0].meta["sharded"]["world_size"] == comm.world_size
    for shard, sources in work:
        for part, cols in sources:
            _import(collection, shard, part, cols)
        _lifecycle(collection, shard, sources, ranks, same_world)


class _WholeTables:
    """Whole tables of one process, seen as a collection of one rank holding each table table-wise."""

    def __init__(self, tables):
        self.comm, self.plan = LocalCommunicator(), None
        self.shards = {n: LocalShard(n, "table", (0, t.dim), t) for n, t in tables.items()}


def load_sharded_tables(tables, paths):
    """Fill fresh whole tables ``{name: EmbeddingTable}`` of one process (an ``EmbeddingCollection``'s) from the
    N files of a ``save_sharded``: column shards joined, row shards merged."""
    load_sharded(_WholeTables(tables), paths)


def _owned_pairs(collection, shard, sources, extra):
    """The rows ``[n, 2 or 3]`` (key, values) of extra ``extra`` of the keys ``shard`` owns now, each key once
    (column shards each hold the same keys' values), or None where no old shard saved it."""
    got = [part.extra(extra) for part, _ in sources if extra in part.extras]
    if not got:
        return None
    pairs = np.concatenate(got)
    _, first = np.unique(pairs[:, 0], return_index=True)
    pairs = pairs[first]
    return pairs[_owned(collection, shard, pairs[:, 0])]


def _lifecycle(collection, shard, sources, ranks, same_world):
    """Restore the clock of ``shard``'s table, and the ticks and pending counts of the keys it owns now. Ranks'
    clocks differ where a rank got no keys of the table in some batches: resumed on as many ranks, each takes its
    own clock back (bit for bit); resharded, each takes the largest, so no key's tick is after the clock (no age
    is negative) and a marker never runs backwards, a lagging rank's keys reading older by its lag."""
    clocks = {ranks[part.path]: part.clock for part, _ in sources if part.clock is not None}
    own = clocks.get(collection.comm.rank) if same_world else None
    clock = own if own is not None else max(clocks.values(), default=None)
    restore_lifecycle(shard.table, clock, _owned_pairs(collection, shard, sources, "ticks"),
                      _owned_pairs(collection, shard, sources, "pending"))


def _import(collection, shard, part, cols):
    """Import the owned keys of one old shard ``part`` (weight columns ``cols``) into ``shard``, chunk by chunk."""
    table, rule = shard.table, shard.table.rule
    width = cols[1] - cols[0]
    whole = cols == shard.cols
    dst_layout = resized(part.layout, width, shard.cols[1] - shard.cols[0], rule)
    for keys, rows, steps in part.chunks():
        keep = _owned(collection, shard, keys)
        keys, rows = keys[keep], rows[keep]
        steps = np.zeros(keys.size, np.int32) if steps is None else steps[keep]
        if not keys.size:
            continue
        if whole:
            table.import_rows(keys, rows, steps)
            continue
        current = np.zeros((keys.size, list(dst_layout.values())[-1][1]), rows.dtype)
        order = np.argsort(keys)
        for k, r, _ in table.export(keys):  # the columns earlier old shards gave these keys
            current[order[np.searchsorted(keys[order], k)]] = r
        table.import_rows(keys, copy_columns(rows, part.layout, cols, current, dst_layout, shard.cols, rule), steps)
