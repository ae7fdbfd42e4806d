"""Reading a snapshot (``format.py``): its seal checked before h5py opens it (``seal.py``), its structure checked
on opening, and each chunk's checksums as it is read; ``SnapshotChain`` reads a full snapshot and its incrementals
as one."""
import json
import os
import zlib
from contextlib import contextmanager
from dataclasses import dataclass

import h5py
import numpy as np

from .format import ATTRS_CRC, EXTRAS, FORMAT, KINDS, PARTS, READS, RESTORE, SEALED, SnapshotError, \
    TableSnapshot, attrs_crc, layout_spans, parse_json
from .seal import check_seal, stamp_of

# What h5py raises on a corrupt file: the seal keeps damage from version 3 files, but not from older ones.
HDF5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError,
               SystemError, RecursionError)


def _checked(path):
    """The file's ``Sealed``: its seal checked (from version 3), before anything parses it as HDF5."""
    if not os.path.isfile(path):
        raise SnapshotError(f"{path}: no such snapshot file; check the path")
    return check_seal(path, SEALED)


@contextmanager
def _open(path, stamp=None):
    """The snapshot file open for reading; a SnapshotError says why it cannot be. ``stamp``: the file's when its
    seal was checked; opening checks that the file is still that one, where it would otherwise check the seal."""
    stamp = stamp or _checked(path).stamp
    try:
        f = h5py.File(path, "r")
        opened = stamp_of(os.fstat(f.id.get_vfd_handle()))  # of the file h5py opened, not of the path now
    except HDF5_ERRORS as e:
        raise SnapshotError(f"{path}: cannot be opened as HDF5 ({e}); the file is truncated or corrupt, "
                            f"so {RESTORE}") from None
    with f:
        if opened != stamp:
            raise SnapshotError(f"{path}: changed since its seal was checked (written again or replaced); read "
                                "the snapshot again")
        yield f


class _Rows:
    """What a snapshot's table and a chain's table share: loading all rows at once."""

    def load_all(self):
        """All rows as a TableSnapshot of NumPy arrays; for tables that fit in memory."""
        got = list(self.chunks())
        keys = np.concatenate([k for k, _, _ in got] or [np.empty(0, np.int64)])
        rows = np.concatenate([r for _, r, _ in got] or [np.empty((0, self.width), self.dtype)])
        steps = None
        if self.step_dtype is not None:
            steps = np.concatenate([s for _, _, s in got] or [np.empty(0, self.step_dtype)])
        return TableSnapshot(self.config, self.layout, keys, rows, steps)

    @property
    def width(self):
        return list(self.layout.values())[-1][1]


@dataclass(frozen=True)
class SnapshotTable(_Rows):
    """One table of a snapshot file: its config and layout, and its rows read a chunk at a time."""
    path: str
    name: str
    config: dict
    layout: dict
    n_rows: int
    chunk_rows: int
    dtype: np.dtype
    step_dtype: np.dtype | None
    verify: bool = True
    extras: tuple = ()  # the names of the EXTRAS it holds
    clock: int | None = None  # the table's update clock when saved; None in snapshots before it was kept
    stamp: tuple = None  # the file's when its seal was checked (seal.stamp_of)

    def extra(self, name):
        """The int64 array of extra ``name`` (``EXTRAS``) checked against its checksums, or None where absent."""
        if name not in self.extras:
            return None
        with _open(self.path, self.stamp) as f:
            try:
                g = f["tables"][self.name]
                values, sums = g[name][...], g[f"{name}_checksums"][...]
            except HDF5_ERRORS as e:
                raise SnapshotError(f"{self.path}: table {self.name!r}: {name!r} cannot be read ({e}); the file "
                                    f"is truncated or corrupt, so {RESTORE}") from None
        starts = range(0, values.shape[0], self.chunk_rows)
        got = [zlib.crc32(np.ascontiguousarray(values[a:a + self.chunk_rows])) for a in starts]
        if self.verify and (len(got) != sums.shape[0] or any(g != s for g, s in zip(got, sums.tolist()))):
            raise SnapshotError(f"{self.path}: table {self.name!r}: {name!r} does not match its checksums; the "
                                f"snapshot is corrupt, so {RESTORE}")
        return values

    def chunks(self):
        """``(keys, rows, steps)`` NumPy arrays per stored chunk, each checked against its checksums."""
        return self._read(PARTS if self.step_dtype is not None else PARTS[:2])

    def keys(self):
        """All keys ``[n_rows]``, without reading the rows."""
        return np.concatenate([k for k, *_ in self._read(PARTS[:1])] or [np.empty(0, np.int64)])

    def _read(self, parts):
        with _open(self.path, self.stamp) as f:
            try:
                g = f["tables"][self.name]
                sums = g["checksums"][...]
            except HDF5_ERRORS as e:
                raise SnapshotError(f"{self.path}: table {self.name!r}: its checksums cannot be read ({e}); the file "
                                    f"is truncated or corrupt, so {RESTORE}") from None
            for i, a in enumerate(range(0, self.n_rows, self.chunk_rows)):
                b = min(a + self.chunk_rows, self.n_rows)
                where = f"{self.path}: table {self.name!r}, chunk {i} (rows {a}:{b})"
                try:
                    got = [g[p][a:b] for p in parts]
                except HDF5_ERRORS as e:
                    raise SnapshotError(f"{where} cannot be read ({e}); the file is truncated or corrupt, "
                                        f"so {RESTORE}") from None
                for j, (p, arr) in enumerate(zip(parts, got)):
                    crc = zlib.crc32(arr)
                    if self.verify and crc != sums[i, j]:
                        raise SnapshotError(f"{where}: the {p} checksum is {crc:#010x} but the file recorded "
                                            f"{int(sums[i, j]):#010x}; the snapshot is corrupt, so {RESTORE}")
                yield tuple(got) + (None,) * (len(PARTS) - len(got))


@dataclass(frozen=True)
class Snapshot:
    """A snapshot file's attributes, and its tables by name."""
    path: str
    id: str
    kind: str
    base: str | None
    created: str
    meta: dict
    tables: dict

    @property
    def incremental(self):
        return self.kind == "incremental"


def _attr(obj, name, where, kind=str):
    """Attribute ``name`` of ``obj``, checked to be a ``kind``: str, int (at least 0) or bool."""
    if name not in obj.attrs:
        raise SnapshotError(f"{where}: attribute {name!r} is missing, so this is not a complete gpuemb snapshot; "
                            f"{RESTORE}")
    v = obj.attrs[name]
    v = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    v = v.item() if isinstance(v, (np.bool_, np.integer)) else v
    if type(v) is not kind or (kind is int and v < 0):  # a bool is an int to isinstance
        raise SnapshotError(f"{where}: attribute {name!r} is {_shown(v)}, not a{' non-negative' * (kind is int)} "
                            f"{kind.__name__}; the snapshot is corrupt, so {RESTORE}")
    return v


def _shown(v):
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _json(obj, name, where, kind=dict):
    try:
        return parse_json(_attr(obj, name, where), f"{where}: attribute {name!r}", kind)
    except ValueError as e:
        raise SnapshotError(f"{e}; the snapshot is corrupt, so {RESTORE}") from None


def _extras(g, where, version, kind):
    """The names of the EXTRAS that group ``g`` holds, each checked to be there with its checksums. A version 3
    group names them in its ``extras``; an older one holds those of which either dataset is there. A delta's tables
    hold ``deleted``. A dataset that is missing where it should be is corrupt, not absent: the run would go on
    without it (a resume without the admission counts, a delta that keeps the keys the table dropped)."""
    names = set(g)  # by iterating the group's links: a damaged name can hide others from a look-up by name
    held = {e: "a delta holds the keys it deleted" for e in ("deleted",) if kind == "delta"}
    if version in SEALED:
        declared = _json(g, "extras", where, list)
        if not all(isinstance(e, str) and e in EXTRAS for e in declared) or len(set(declared)) != len(declared):
            raise SnapshotError(f"{where}: attribute 'extras' is {_shown(declared)}, not a list of names from "
                                f"{list(EXTRAS)}; the snapshot is corrupt, so {RESTORE}")
        held |= {e: "the table's attribute 'extras' names it" for e in declared}
        stray = [e for e in EXTRAS if e not in held and (e in names or f"{e}_checksums" in names)]
        if stray:
            raise SnapshotError(f"{where}: holds dataset {stray[0]!r}, which its attribute 'extras' does not name; "
                                f"the snapshot is corrupt, so {RESTORE}")
    held |= {e: "the other of the dataset and its checksums is there" for e in EXTRAS
             if e not in held and (e in names or f"{e}_checksums" in names)}
    for e, why in held.items():
        for d in (e, f"{e}_checksums"):
            if d not in names:
                raise SnapshotError(f"{where}: dataset {d!r} is missing, but {why}; the snapshot is corrupt, so "
                                    f"{RESTORE}")
        if not isinstance(g[e], h5py.Dataset) or g[e].dtype != np.int64 or \
                not isinstance(g[f"{e}_checksums"], h5py.Dataset):
            raise SnapshotError(f"{where}: dataset {e!r} or its checksums are not an int64 dataset and its "
                                f"checksums; the snapshot is corrupt, so {RESTORE}")
    return tuple(e for e in EXTRAS if e in held)


def _table(f, path, name, verify, version, kind, stamp):
    where = f"{path}: table {name!r}"
    g = f["tables"][name]
    if not isinstance(g, h5py.Group):
        raise SnapshotError(f"{where}: is not a group; the snapshot is corrupt, so {RESTORE}")
    for p in ("keys", "rows", "checksums") + (("steps",) if _attr(g, "has_steps", where, bool) else ()):
        if not isinstance(g.get(p), h5py.Dataset):
            raise SnapshotError(f"{where}: dataset {p!r} is missing; {RESTORE}")
    try:
        layout = layout_spans(_json(g, "layout", where), where)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise SnapshotError(f"{where}: attribute 'layout' is wrong ({e}); {RESTORE}") from None
    n, c = _attr(g, "n_rows", where, int), _attr(g, "chunk_rows", where, int)
    if c < 1:
        raise SnapshotError(f"{where}: attribute 'chunk_rows' is {c}, not positive; the snapshot is corrupt, "
                            f"so {RESTORE}")
    dtypes = {p: g[p].dtype for p in PARTS if p in g}
    steps = dtypes.get("steps", np.dtype(np.int32))
    if dtypes["keys"].kind not in "iu" or dtypes["rows"].kind != "f" or steps.kind not in "iu" \
            or g["checksums"].dtype != np.uint32:
        raise SnapshotError(f"{where}: dataset dtypes {dtypes}, checksums {g['checksums'].dtype}: keys and steps "
                            f"must be integers, rows floats, checksums uint32; {RESTORE}")
    clock = _attr(g, "clock", where, int) if "clock" in g.attrs else None
    t = SnapshotTable(path, name, _json(g, "config", where), layout, n, c, dtypes["rows"], dtypes.get("steps"),
                      verify, _extras(g, where, version, kind), clock, stamp)
    want = {"keys": (n,), "rows": (n, t.width), "steps": (n,), "checksums": (-(-n // c), 3)}
    for p, shape in want.items():
        if p in g and g[p].shape != shape:
            raise SnapshotError(f"{where}: dataset {p!r} has shape {g[p].shape}, but the attributes say {shape}; "
                                f"the snapshot is truncated or corrupt, so {RESTORE}")
    return t


def read_snapshot(path, verify=True):
    """A Snapshot of the file at ``path``, checked to be whole; with ``verify`` its tables check every chunk read."""
    path = os.fspath(path)
    sealed = _checked(path)
    with _open(path, sealed.stamp) as f:
        try:
            if _attr(f, "format", path) != FORMAT:
                raise SnapshotError(f"{path}: format is {_attr(f, 'format', path)!r}, not {FORMAT!r}; "
                                    "this file is not a gpuemb snapshot")
            version = _attr(f, "version", path, int)
            if version not in READS:
                raise SnapshotError(f"{path}: snapshot version {version}, but this gpuemb reads version "
                                    f"{' or '.join(map(str, READS))}; read it with the gpuemb that wrote it")
            if sealed.version != (version if version in SEALED else None):
                raise SnapshotError(f"{path}: is version {version}, but its seal is "
                                    f"{'missing' if sealed.version is None else f'of version {sealed.version}'}; "
                                    f"the snapshot is corrupt, so {RESTORE}")
            kind = _attr(f, "kind", path)
            if kind not in KINDS or not isinstance(f.get("tables"), h5py.Group):
                raise SnapshotError(f"{path}: kind {kind!r} or the /tables group is wrong; {RESTORE}")
            tables = {name: _table(f, path, name, verify, version, kind, sealed.stamp) for name in f["tables"]}
            snap = Snapshot(path, _attr(f, "id", path), kind, _attr(f, "base", path) or None,
                            _attr(f, "created", path), _json(f, "meta", path), tables)
            if version > 1 and _attr(f, ATTRS_CRC, path, int) != attrs_crc(f):
                raise SnapshotError(f"{path}: the checksum of its attributes does not match them; the snapshot is "
                                    f"corrupt, so {RESTORE}")
            return snap
        except HDF5_ERRORS as e:
            raise SnapshotError(f"{path}: cannot be read ({type(e).__name__}: {e}); the file is corrupt, "
                                f"so {RESTORE}") from None


@dataclass(frozen=True)
class ChainTable(_Rows):
    """One table across a chain: each key once, with its row from the latest snapshot that holds it."""
    name: str
    parts: tuple

    @property
    def config(self):
        return self.parts[-1].config

    @property
    def layout(self):
        return self.parts[0].layout

    @property
    def dtype(self):
        return next((p.dtype for p in self.parts if p.n_rows), self.parts[0].dtype)

    @property
    def step_dtype(self):
        return next((p.step_dtype for p in self.parts if p.n_rows), self.parts[0].step_dtype)

    def pending(self):
        """The admission counts ``[n, 3]`` (key, count, last seen) of the latest snapshot that holds them, or None: each
        snapshot holds every pending key of its time."""
        return next((p.extra("pending") for p in reversed(self.parts) if "pending" in p.extras), None)

    @property
    def clock(self):
        """The table's update clock in the latest snapshot that records it, or None."""
        return next((p.clock for p in reversed(self.parts) if p.clock is not None), None)

    def ticks(self):
        """``[n, 2]`` (key, tick) of each key's last update, from the latest snapshot holding its tick, or None:
        a snapshot holds the ticks of the rows it holds, as it holds their rows."""
        got = [p.extra("ticks") for p in self.parts if "ticks" in p.extras]
        if not got:
            return None
        both = np.concatenate(got[::-1])  # the latest first, so the first of each key is its latest tick
        _, first = np.unique(both[:, 0], return_index=True)
        return both[first]

    def chunks(self):
        """``(keys, rows, steps)`` per stored chunk, less the keys a later snapshot overrides.

        Holds the keys of the later snapshots in memory: incrementals are small by design.
        """
        newer = [np.empty(0, np.int64)]  # newer[j]: the keys of the last j snapshots
        for part in reversed(self.parts[1:]):
            newer.append(np.union1d(newer[-1], part.keys()))
        for i, part in enumerate(self.parts):
            over = newer[len(self.parts) - 1 - i]
            for keys, rows, steps in part.chunks():
                keep = ~np.isin(keys, over)
                yield keys[keep], rows[keep], None if steps is None else steps[keep]


class SnapshotChain:
    """A full snapshot and the incrementals written after it, in order; ``tables[name]`` is each key's latest row."""

    def __init__(self, snapshots, verify=True):
        snaps = [s if isinstance(s, Snapshot) else read_snapshot(s, verify) for s in snapshots]
        if not snaps:
            raise ValueError("SnapshotChain: no snapshots; give a full snapshot, then its incrementals in order")
        for s in snaps:
            if s.kind == "delta":
                raise SnapshotError(f"{s.path}: is a delta (changes since a table's marker), not part of a snapshot "
                                    "chain; apply it to live tables with apply_delta")
        if snaps[0].incremental:
            raise SnapshotError(f"{snaps[0].path}: is an incremental snapshot on base {snaps[0].base}; start the "
                                "chain with that full snapshot")
        for prev, s in zip(snaps, snaps[1:]):
            if not s.incremental:
                raise SnapshotError(f"{s.path}: is a full snapshot ({s.id}) inside a chain; start a new chain there")
            if s.base != prev.id:
                raise SnapshotError(f"{s.path}: applies on snapshot {s.base}, but the snapshot before it, "
                                    f"{prev.path}, is {prev.id}; list the incrementals in the order they were "
                                    "written, each after its base")
        self.snapshots = tuple(snaps)
        parts = {}
        for s in snaps:
            for name, t in s.tables.items():
                parts.setdefault(name, []).append(t)
        for name, ts in parts.items():
            kinds = {(json.dumps(t.layout), str(t.dtype), str(t.step_dtype)) for t in ts if t.n_rows}
            if len(kinds) > 1:
                raise SnapshotError(f"table {name!r}: its layout, row dtype or steps differ across "
                                    f"{[t.path for t in ts]}: {sorted(kinds)}; a chain must keep each table's rows")
        self.tables = {name: ChainTable(name, tuple(ts)) for name, ts in parts.items()}

    @property
    def id(self):
        """The id of the latest snapshot: the base of the next incremental."""
        return self.snapshots[-1].id
