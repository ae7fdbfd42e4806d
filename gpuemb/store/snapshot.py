"""Snapshots of embedding tables: keys, rows and config in one HDF5 file (DESIGN.md, "The embedding store").

A snapshot is plain HDF5 (docs/store.md, "Snapshot format"). File attributes: ``format`` = "gpuemb-snapshot",
``version`` = 1, ``id`` (a fresh hex id), ``kind`` ("full" or "incremental"), ``base`` (the id an incremental
applies on, "" for a full one), ``created`` (UTC, ISO 8601) and ``meta`` (JSON). Each table is a group
``/tables/<name>`` with attributes ``config`` and ``layout`` (JSON: ``{part: [start, stop]}`` of the row columns,
weights first), ``part_dtypes`` (JSON: ``{part: dtype}``, what each part's columns read as: a float16 table keeps
float32 state as pairs of 16-bit columns, see ``row_format.py``), ``n_rows``, ``chunk_rows`` and ``has_steps``, and these datasets, all but ``checksums`` chunked
by ``chunk_rows`` rows:

========= ============== ===================== ===================================================
dataset   dtype          shape                 holds
========= ============== ===================== ===================================================
keys      int64          ``[n_rows]``          the feature IDs, each once
rows      float32/16     ``[n_rows, width]``   ``[weights | optimizer state]`` per key
steps     int (as given) ``[n_rows]``          the per-row step counter, only when ``has_steps``
checksums uint32         ``[n_chunks, 3]``     CRC32 of chunk i's keys, rows and steps (0 without steps)
========= ============== ===================== ===================================================

Chunk i holds rows ``i * chunk_rows`` up to ``min((i + 1) * chunk_rows, n_rows)``, and its checksums cover
the bytes of exactly those rows in C order. The file is written beside its target as a temp file, synced, and
renamed over it, so the target is always a whole snapshot; a temp file left by a killed process is named
``.<name>.tmp-*``. Readers check the structure when opening and every chunk's checksums as they read it.
"""
import json
import os
import uuid
import zlib
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import chain

import h5py
import numpy as np

from gpuemb.autograd.backend import to_host
from gpuemb.store.errors import StoreError

FORMAT, VERSION = "gpuemb-snapshot", 1
PARTS = ("keys", "rows", "steps")
_RESTORE = "restore from another snapshot or write this one again"


class SnapshotError(StoreError):
    """A snapshot is missing, of another format, truncated or corrupt, or does not fit its chain."""


def _spans(layout, where):
    """``{part: [start, stop]}`` from slices or pairs, checked to tile the row columns from 0, weights first."""
    spans = {name: [s.start, s.stop] if isinstance(s, slice) else [int(s[0]), int(s[1])]
             for name, s in layout.items()}
    stops = [0] + [stop for _, stop in spans.values()]
    if next(iter(spans), None) != "weights" or [start for start, _ in spans.values()] != stops[:-1] or \
            any(a >= b for a, b in zip(stops, stops[1:])):
        raise ValueError(f"{where}: layout {spans} must start with 'weights' and tile the row columns from 0 "
                         "without gaps; pass optim.rowwise.row_layout(rule, D)")
    return spans


@dataclass(frozen=True)
class TableSnapshot:
    """One table's config, row layout and rows: arrays ``keys [n]``, ``rows [n, width]``, ``steps [n]`` or None
    (NumPy or CuPy), or, from ``from_chunks``, an iterable of ``(keys, rows, steps)`` for a table too big to hold.
    ``part_dtypes``: ``{part: dtype}`` where a part reads as another dtype than the rows (None: none does)."""
    config: dict
    layout: dict
    keys: object = None
    rows: object = None
    steps: object = None
    source: object = field(default=None, repr=False)
    part_dtypes: dict = None

    @classmethod
    def from_chunks(cls, config, layout, chunks, part_dtypes=None):
        """A table streamed from ``chunks``, an iterable of ``(keys, rows, steps)`` of any sizes, read once."""
        return cls(config, layout, source=chunks, part_dtypes=part_dtypes)

    def validate(self, name):
        if (self.source is None) == (self.keys is None or self.rows is None):
            raise ValueError(f"TableSnapshot {name!r}: give either keys and rows, or chunks through from_chunks")
        _spans(self.layout, f"TableSnapshot {name!r}")
        return self

    @property
    def width(self):
        return list(_spans(self.layout, "TableSnapshot").values())[-1][1]

    def chunks(self, chunk_rows):
        """``(keys, rows, steps)`` pieces: slices of ``chunk_rows`` rows (one, maybe empty, at least), or as given."""
        if self.source is not None:
            return iter(self.source)
        s = self.steps
        return ((self.keys[a:a + chunk_rows], self.rows[a:a + chunk_rows], None if s is None else s[a:a + chunk_rows])
                for a in range(0, max(len(self.keys), 1), chunk_rows))


def _plain(v):
    if isinstance(v, np.generic):  # e.g. a float32 setting: JSON takes it as the Python number
        return v.item()
    raise TypeError(f"{type(v).__name__} {v!r} is not JSON")


def _json(value, where):
    try:
        return json.dumps(value, default=_plain)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: cannot be written as JSON ({e}); use numbers, strings, lists and dicts") from None


class _TableWriter:
    """Writes one table's pieces through host buffers of ``chunk_rows`` rows, a stored chunk and its checksums at
    a time, so a CuPy table or a stream is never copied whole."""

    def __init__(self, group, name, table, first, c):
        keys, rows, steps = first
        self.where, self.c, self.fill, self.n, self.sums = f"write_snapshot: table {name!r}", c, 0, 0, []
        self.width, self.dtype = table.width, np.dtype(rows.dtype)
        self.step_dtype = None if steps is None else np.dtype(steps.dtype)
        if self.dtype.kind != "f":
            raise ValueError(f"{self.where}: rows are {self.dtype}; want float32 or float16")
        self.g = g = group.create_group(name)
        g.attrs["config"] = _json(table.config, f"{self.where}: config")
        g.attrs["layout"] = json.dumps(_spans(table.layout, self.where))
        g.attrs["part_dtypes"] = json.dumps({p: str(self.dtype) for p in table.layout} | (table.part_dtypes or {}))
        g.attrs["chunk_rows"], g.attrs["has_steps"] = c, steps is not None
        dtypes = (np.dtype(np.int64), self.dtype, self.step_dtype)
        self.bufs = [None if d is None else np.empty((c, self.width) if p == "rows" else (c,), d)
                     for p, d in zip(PARTS, dtypes)]
        self.ds = [None if b is None else g.create_dataset(p, shape=(0,) + b.shape[1:], maxshape=(None,) + b.shape[1:],
                                                            dtype=b.dtype, chunks=b.shape)
                   for p, b in zip(PARTS, self.bufs)]

    def append(self, keys, rows, steps):
        n = len(keys)
        if rows.shape != (n, self.width) or rows.dtype != self.dtype or (steps is None) != (self.step_dtype is None) \
                or (steps is not None and steps.shape != (n,)) or np.dtype(keys.dtype).kind not in "iu":
            raise ValueError(f"{self.where}: a piece of keys {keys.dtype}{keys.shape}, rows {rows.dtype}{rows.shape}, "
                             f"steps {None if steps is None else steps.shape}, after rows of {self.dtype} and width "
                             f"{self.width} with{'out' if self.step_dtype is None else ''} steps; "
                             "give every piece the same row dtype, width and steps")
        done = 0
        while done < n:
            k = min(n - done, self.c - self.fill)
            for buf, src in zip(self.bufs, (keys, rows, steps)):
                if buf is not None:
                    buf[self.fill:self.fill + k] = to_host(src[done:done + k])
            self.fill, done = self.fill + k, done + k
            if self.fill == self.c:
                self._flush()

    def _flush(self):
        a, b = self.n, self.n + self.fill
        for ds, buf in zip(self.ds, self.bufs):
            if ds is not None:
                ds.resize(b, axis=0)
                ds[a:b] = buf[:self.fill]
        self.sums.append([0 if buf is None else zlib.crc32(buf[:self.fill]) for buf in self.bufs])
        self.n, self.fill = b, 0

    def close(self):
        if self.fill:
            self._flush()
        self.g.create_dataset("checksums", data=np.array(self.sums, np.uint32).reshape(-1, 3))
        self.g.attrs["n_rows"] = self.n


@contextmanager
def _atomic(path):
    """A temp path beside ``path`` that is synced and renamed to it when the block succeeds, and removed if not."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        fsync(tmp)  # the data must be on disk before the rename makes it the snapshot
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    fsync(folder)  # and the rename itself must survive a power loss


def fsync(path):
    """Flush the file or folder at ``path`` to disk (a folder: its entries, so a rename in it survives)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(path, tables, incremental=False, base=None, meta=None, chunk_rows=16384):
    """Write ``tables`` (name -> TableSnapshot) to ``path`` atomically and return the new snapshot's id.

    An incremental snapshot holds only the rows dirtied since the snapshot whose id is ``base``.
    """
    path = os.fspath(path)
    if incremental != bool(base):
        raise ValueError(f"write_snapshot({path}): incremental={incremental} with base={base!r}; an incremental "
                         "snapshot needs the id of the snapshot it applies on, and a full one has none")
    if chunk_rows < 1:
        raise ValueError(f"write_snapshot({path}): chunk_rows={chunk_rows} must be positive")
    snapshot_id = uuid.uuid4().hex
    with _atomic(path) as tmp:
        try:
            f = h5py.File(tmp, "w")
        except OSError as e:
            raise OSError(f"write_snapshot: cannot create {tmp} ({e}); pass a path in a writable folder that exists") \
                from None
        with f:
            a = f.attrs
            a["format"], a["version"], a["id"] = FORMAT, VERSION, snapshot_id
            a["kind"], a["base"] = ("incremental", base) if incremental else ("full", "")
            a["created"] = datetime.now(timezone.utc).isoformat()
            a["meta"] = _json(meta or {}, f"write_snapshot({path}): meta")
            group = f.create_group("tables")
            for name, table in tables.items():
                if not name or "/" in name or name in (".", ".."):
                    raise ValueError(f"write_snapshot({path}): table name {name!r} cannot be an HDF5 group name")
                pieces = iter(table.validate(name).chunks(chunk_rows))
                # An empty stream still makes a table: of float32 rows without steps.
                first = next(pieces, None) or (np.empty(0, np.int64), np.empty((0, table.width), np.float32), None)
                writer = _TableWriter(group, name, table, first, chunk_rows)
                for piece in chain([first], pieces):
                    writer.append(*piece)
                writer.close()
    return snapshot_id


@contextmanager
def _open(path):
    """The snapshot file open for reading; a SnapshotError says why it cannot be."""
    if not os.path.isfile(path):
        raise SnapshotError(f"{path}: no such snapshot file; check the path")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise SnapshotError(f"{path}: cannot be opened as HDF5 ({e}); the file is truncated or corrupt, "
                            f"so {_RESTORE}") from None
    with f:
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

    def chunks(self):
        """``(keys, rows, steps)`` NumPy arrays per stored chunk, each checked against its checksums."""
        return self._read(PARTS if self.step_dtype is not None else PARTS[:2])

    def keys(self):
        """All keys ``[n_rows]``, without reading the rows."""
        return np.concatenate([k for k, *_ in self._read(PARTS[:1])] or [np.empty(0, np.int64)])

    def _read(self, parts):
        with _open(self.path) as f:
            g = f["tables"][self.name]
            sums = g["checksums"][...]
            for i, a in enumerate(range(0, self.n_rows, self.chunk_rows)):
                b = min(a + self.chunk_rows, self.n_rows)
                where = f"{self.path}: table {self.name!r}, chunk {i} (rows {a}:{b})"
                try:
                    got = [g[p][a:b] for p in parts]
                except (OSError, ValueError, KeyError) as e:
                    raise SnapshotError(f"{where} cannot be read ({e}); the file is truncated or corrupt, "
                                        f"so {_RESTORE}") from None
                for j, (p, arr) in enumerate(zip(parts, got)):
                    crc = zlib.crc32(arr)
                    if self.verify and crc != sums[i, j]:
                        raise SnapshotError(f"{where}: the {p} checksum is {crc:#010x} but the file recorded "
                                            f"{int(sums[i, j]):#010x}; the snapshot is corrupt, so {_RESTORE}")
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


def _attr(obj, name, where):
    if name not in obj.attrs:
        raise SnapshotError(f"{where}: attribute {name!r} is missing, so this is not a complete gpuemb snapshot; "
                            f"{_RESTORE}")
    v = obj.attrs[name]
    return v.decode() if isinstance(v, bytes) else v


def _table(f, path, name, verify):
    where = f"{path}: table {name!r}"
    g = f["tables"][name]
    for p in ("keys", "rows", "checksums") + (("steps",) if _attr(g, "has_steps", where) else ()):
        if p not in g:
            raise SnapshotError(f"{where}: dataset {p!r} is missing; {_RESTORE}")
    layout = json.loads(_attr(g, "layout", where))
    n, c = int(_attr(g, "n_rows", where)), int(_attr(g, "chunk_rows", where))
    t = SnapshotTable(path, name, json.loads(_attr(g, "config", where)), layout, n, c, g["rows"].dtype,
                      g["steps"].dtype if "steps" in g else None, verify)
    want = {"keys": (n,), "rows": (n, t.width), "steps": (n,), "checksums": (-(-n // c), 3)}
    for p, shape in want.items():
        if p in g and g[p].shape != shape:
            raise SnapshotError(f"{where}: dataset {p!r} has shape {g[p].shape}, but the attributes say {shape}; "
                                f"the snapshot is truncated or corrupt, so {_RESTORE}")
    return t


def read_snapshot(path, verify=True):
    """A Snapshot of the file at ``path``, checked to be whole; with ``verify`` its tables check every chunk read."""
    path = os.fspath(path)
    with _open(path) as f:
        try:
            if _attr(f, "format", path) != FORMAT:
                raise SnapshotError(f"{path}: format is {_attr(f, 'format', path)!r}, not {FORMAT!r}; "
                                    "this file is not a gpuemb snapshot")
            if int(_attr(f, "version", path)) != VERSION:
                raise SnapshotError(f"{path}: snapshot version {_attr(f, 'version', path)}, but this gpuemb reads "
                                    f"version {VERSION}; read it with the gpuemb that wrote it")
            kind = _attr(f, "kind", path)
            if kind not in ("full", "incremental") or "tables" not in f:
                raise SnapshotError(f"{path}: kind {kind!r} or the /tables group is wrong; {_RESTORE}")
            tables = {name: _table(f, path, name, verify) for name in f["tables"]}
            return Snapshot(path, _attr(f, "id", path), kind, _attr(f, "base", path) or None,
                            _attr(f, "created", path), json.loads(_attr(f, "meta", path)), tables)
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise SnapshotError(f"{path}: cannot be read ({type(e).__name__}: {e}); the file is corrupt, "
                                f"so {_RESTORE}") from None


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
