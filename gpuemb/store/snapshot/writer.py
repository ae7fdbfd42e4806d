"""Writing a snapshot (``format.py``): each table streamed to HDF5 a chunk at a time, into a temp file that is
sealed (``seal.py``: the CRC32 of the whole file, read back once HDF5 has closed it), synced and renamed over the
target, so the target is always a whole snapshot."""
import json
import os
import uuid
import zlib
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from itertools import chain

import numpy as np

from gpuemb.autograd.backend import to_host
from gpuemb.autograd.plain import plain
from gpuemb.io.h5output import H5Output
from gpuemb.io.shard_attrs import put_text

from .format import ATTRS_CRC, EXTRAS, FORMAT, PARTS, VERSION, attrs_crc, layout_spans
from .seal import USERBLOCK, seal


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
        put_text(g.attrs, "config", json.dumps(plain(table.config, f"{self.where}: config")))
        put_text(g.attrs, "layout", json.dumps(layout_spans(table.layout, self.where)))
        put_text(g.attrs, "part_dtypes",
                 json.dumps({p: str(self.dtype) for p in table.layout} | (table.part_dtypes or {})))
        g.attrs["chunk_rows"], g.attrs["has_steps"] = c, steps is not None
        if table.clock is not None:
            g.attrs["clock"] = int(table.clock)
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


def _output(tmp, path):
    """An H5Output at ``tmp`` whose file starts with a user block for the seal. Attributes are stored as HDF5 1.8
    does: one too long for the object header (a large meta) goes to dense storage, where 1.6's format refuses it."""
    return H5Output(tmp, path, userblock_size=USERBLOCK, libver=("v108", "v108"))


def _write_extra(group, name, values, c):
    """One of ``EXTRAS``: an int64 dataset written whole, and the CRC32 of each ``c`` rows of it."""
    values = np.ascontiguousarray(to_host(values), np.int64)
    group.create_dataset(name, data=values)
    sums = [zlib.crc32(values[a:a + c]) for a in range(0, values.shape[0], c)]
    group.create_dataset(f"{name}_checksums", data=np.array(sums, np.uint32))


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


def write_snapshot(path, tables, incremental=False, base=None, meta=None, chunk_rows=16384, delta=False):
    """Write ``tables`` (name -> TableSnapshot) to ``path`` atomically and return the new snapshot's id.

    An incremental snapshot holds only the rows dirtied since the snapshot whose id is ``base``; a ``delta`` the
    rows changed and keys deleted since a table's marker (``snapshot/delta.py``), with no base.
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
            out = _output(tmp, path)
        except OSError as e:
            raise OSError(e.errno, f"write_snapshot: cannot create {tmp} ({e.strerror}); pass a path in a writable "
                                   "folder that exists") from None
        with out:
            f = out.file
            a = f.attrs
            a["version"] = VERSION
            kind, base = ("incremental", base) if incremental else ("delta" if delta else "full", "")
            texts = {"format": FORMAT, "id": snapshot_id, "kind": kind, "base": base,
                     "created": datetime.now(timezone.utc).isoformat(),
                     "meta": json.dumps(plain(meta or {}, f"write_snapshot({path}): meta"))}
            for name, text in texts.items():
                put_text(a, name, text)
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
                    out.check()  # a full disk stops the writing here, not at the end
                writer.close()
                for extra, values in (table.extras or {}).items():
                    if extra not in EXTRAS:
                        raise ValueError(f"write_snapshot({path}): table {name!r} has extra {extra!r}; the "
                                         f"format keeps {', '.join(EXTRAS)}")
                    _write_extra(writer.g, extra, values, chunk_rows)
                put_text(writer.g.attrs, "extras", json.dumps(list(table.extras or {})))
            a[ATTRS_CRC] = attrs_crc(f)
        seal(tmp, VERSION)
    return snapshot_id
