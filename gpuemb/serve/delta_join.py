"""A delta's table files joined into whole tables, as a bundle holds them (docs/serve.md, "Following a training
run").

A run in one process writes a delta as one file of whole tables. A run on W ranks writes one file a rank, each
holding the changes of that rank's shards, with ``"sharded"`` in its meta: the rank, W, and per table the shard's
kind, weight columns and whole dim (``gpuemb/train/deltas.py``, as a sharded snapshot records them). Joined:

- table-wise and data-parallel: the one file that holds the table gives it whole;
- row-wise: each key lives on one rank, so the table's change is the union of the ranks' keys and of their drops;
- column-wise: each shard holds the columns ``[start, stop)`` of the keys it changed. A lookup sends every column
  shard of a table the same keys and each updates all of them, at the same steps (so their clocks, ticks and
  drops agree): the shards' deltas hold the same keys, and a key's changed row is their columns side by side.
  Shards that disagree (a key changed in one but not another) cannot be joined without the other's columns, and
  are refused.
- table-row-wise and grid (2-D): the shards of each column range (one range for table-row-wise, one a host for a
  grid) are joined by rows, as row-wise ones, and the ranges then side by side, as column-wise ones.

A delta of any number of ranks joins into the same whole tables, so a bundle follows a run across its resumes at
other world sizes.
"""
import numpy as np

from .errors import BundleError

KINDS = ("table", "row", "column", "data", "table_row", "grid")
WHOLE = ("table", "data")  # kinds whose table is whole in one file


def _whole(snap):
    """The ``"sharded"`` meta of a one-process file: one rank holding every table whole."""
    return {"rank": 0, "world_size": 1, "shards": {n: {"kind": "table", "cols": [0, t.config.get("dim")],
                                                       "dim": t.config.get("dim")} for n, t in snap.tables.items()}}


def _is_count(v, low=0):
    return type(v) is int and v >= low


def _mark(snap):
    """The file's ``"sharded"`` meta, checked to be what the writer writes."""
    m = snap.meta.get("sharded")
    if m is None:
        return _whole(snap)
    ok = isinstance(m, dict) and _is_count(m.get("rank")) and _is_count(m.get("world_size"), 1) \
        and isinstance(m.get("shards"), dict)
    ok = ok and all(n in snap.tables and isinstance(i, dict) and i.get("kind") in KINDS and _is_count(i.get("dim"), 1)
                    and isinstance(i.get("cols"), list) and len(i["cols"]) == 2 and all(map(_is_count, i["cols"]))
                    and i["cols"][0] < i["cols"][1] <= i["dim"] for n, i in m["shards"].items())
    if not ok:
        raise BundleError(f"{snap.path}: its meta's 'sharded' ({str(m)[:80]}) is not what a training run writes; the "
                          "delta is damaged")
    return m


def join_tables(snaps, dims):
    """``{name: (keys [n], weights [n, dim] float32, deleted keys [m])}`` of the delta whose table files, read and
    checked, are ``snaps`` (one, or one a rank in rank order), for a bundle of tables ``dims`` (``{name: dim}``)."""
    pieces = {}
    for i, snap in enumerate(snaps):
        m = _mark(snap)
        if m["rank"] != i or m["world_size"] != len(snaps):
            raise BundleError(f"{snap.path}: is rank {m['rank']} of {m['world_size']}, but the index lists it as rank "
                              f"{i} of {len(snaps)}; the delta's files are mixed up, copy the run's folder whole")
        for name, info in m["shards"].items():
            pieces.setdefault(name, []).append((snap.tables[name], info))
    if sorted(pieces) != sorted(dims):
        raise BundleError(f"{snaps[0].path}: the delta holds tables {sorted(pieces)}, the bundle {sorted(dims)}; "
                          "follow the run the bundle was exported from")
    return {name: _join(name, pieces[name], dims[name]) for name in dims}


def _rows(part, info):
    """``(keys, weights [n, width] float32)`` of one shard's changed rows, sorted by key: their weight columns."""
    width = info["cols"][1] - info["cols"][0]
    if part.config.get("dim") != width:
        raise BundleError(f"{part.path}: table {part.name!r} holds rows of dim {part.config.get('dim')}, but its "
                          f"shard's columns are {info['cols']}; the delta is damaged")
    got = list(part.chunks())  # each chunk checked against its checksums
    keys = np.concatenate([k for k, _, _ in got] + [np.zeros(0, np.int64)]).astype(np.int64)
    weights = np.concatenate([r[:, :width] for _, r, _ in got] + [np.zeros((0, width), np.float32)])
    order = np.argsort(keys, kind="stable")
    return keys[order], weights[order].astype(np.float32)


def _join(name, pieces, dim):
    """One table's change from its shards' ``pieces`` ``[(SnapshotTable, info)]``: the shards of each column range
    (one range but for column and grid shards) joined by rows, then the ranges side by side."""
    path, kinds = pieces[0][0].path, sorted({info["kind"] for _, info in pieces})
    if any(info["dim"] != dim for _, info in pieces):
        raise BundleError(f"{path}: table {name!r} has dim {pieces[0][1]['dim']}, the bundle's {dim}; follow the run "
                          "the bundle was exported from")
    if len(kinds) > 1 or (kinds[0] in WHOLE and len(pieces) > 1):
        raise BundleError(f"{path}: table {name!r} is in {len(pieces)} of the delta's files as {kinds}; a table is "
                          "split one way, and a whole one is in one file, so the delta is damaged")
    deleted = np.unique(np.concatenate([part.extra("deleted") for part, _ in pieces] + [np.zeros(0, np.int64)]))
    ranges = {}
    for part, info in pieces:
        ranges.setdefault(tuple(info["cols"]), []).append((part, info))
    joined = [(cols, *_by_rows(name, group)) for cols, group in sorted(ranges.items())]
    return (*_by_columns(name, path, joined, dim), deleted)


def _by_rows(name, group):
    """``(keys, weights)`` of the shards of one column range: each key lives on one of them, so their union."""
    rows = [_rows(part, info) for part, info in group]
    keys, weights = np.concatenate([k for k, _ in rows]), np.concatenate([w for _, w in rows])
    if np.unique(keys).size != keys.size:
        raise BundleError(f"{group[0][0].path}: table {name!r} has keys changed by two row shards, which hold each "
                          "key on one rank; the delta's files are of different runs or damaged")
    order = np.argsort(keys, kind="stable")
    return keys[order], weights[order]


def _by_columns(name, path, joined, dim):
    """``(keys, weights [n, dim])``: the column ranges' ``joined`` ``[(cols, keys, weights)]`` side by side, key by
    key. Every range of a table changes the same keys (a lookup reaches each), so ranges that disagree are refused."""
    edges = [c for cols, _, _ in joined for c in cols]
    if edges[0] != 0 or edges[-1] != dim or edges[1:-1:2] != edges[2::2]:
        raise BundleError(f"{path}: the column shards of table {name!r} cover {[list(c) for c, _, _ in joined]}, "
                          f"not the columns [0, {dim}) once; the delta's files are damaged")
    keys = joined[0][1]
    for cols, k, _ in joined[1:]:
        if not np.array_equal(k, keys):
            raise BundleError(f"{path}: the column shard {list(cols)} of table {name!r} changed other keys than the "
                              f"shard {list(joined[0][0])} ({k.size} against {keys.size}); the column shards of a "
                              "table change the same keys, so the delta's files are of different runs")
    return keys, np.concatenate([w for _, _, w in joined], axis=1)
