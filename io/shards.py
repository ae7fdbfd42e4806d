"""HDF5 shards: the layout the converter and the generator write and the loader reads.

A shard ``<out>/<split>/part-00000.h5`` is plain HDF5, readable with h5py or any HDF5 tool:

======== ======= ==================== ===========================================
dataset  dtype   shape                chunks
======== ======= ==================== ===========================================
label    float32 ``[N]`` or ``[N, T]``  ``(chunk_rows,)`` or ``(chunk_rows, T)``
dense    float32 ``[N, n_dense]``       ``(chunk_rows, n_dense)``
sparse   int64   ``[N, S]``             ``(chunk_rows, S)``
======== ======= ==================== ===========================================

File attributes: ``format`` = "gpuemb-shard", ``version`` = 1, ``n_rows``, ``chunk_rows``, and JSON strings
``label_names``, ``dense_names``, ``sparse_names``, ``sparse_hotness`` (ids per sparse feature: feature k owns
``hotness[k]`` consecutive columns of ``sparse``, so ``S = sum(hotness)``) and ``meta`` (the schema, sources,
split and options that made it). Each role is its own dataset, so a reader takes only the columns it needs.

A shard is written to ``part-*.h5.tmp`` and renamed when complete, so a file named ``.h5`` is never half
written by a run that stopped. Readers still check ``n_rows`` against every dataset's length, and turn h5py's
errors into a :class:`~gpuemb.io.errors.ShardError` that names the file.
"""
import glob
import json
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from gpuemb.io.batch import Batch
from gpuemb.io.errors import SchemaError, ShardError

FORMAT, VERSION = "gpuemb-shard", 1


@dataclass(frozen=True)
class ShardLayout:
    """The columns of a shard: names per role, and the hotness of each sparse feature (1 for one-hot)."""
    label_names: tuple
    dense_names: tuple
    sparse_names: tuple
    hotness: tuple = ()
    meta: dict = field(default_factory=dict, compare=False)

    def validate(self):
        if not self.label_names:
            raise ValueError("ShardLayout: no label column; name at least one")
        if self.hotness and len(self.hotness) != len(self.sparse_names):
            raise ValueError(f"ShardLayout: {len(self.hotness)} hotness values for {len(self.sparse_names)} "
                             "sparse features; give one per feature")
        return self

    @property
    def widths(self):
        """Columns of (label, dense, sparse); a single label is stored as ``[N]`` (width 0)."""
        T = len(self.label_names)
        return (0 if T == 1 else T), len(self.dense_names), sum(self.hotness or (1,) * len(self.sparse_names))


@dataclass(frozen=True)
class WriteOptions:
    """Shard size and chunking. ``rows_per_shard`` must be a multiple of ``chunk_rows``."""
    chunk_rows: int = 16384
    rows_per_shard: int = 1 << 21
    compression: str | None = None  # e.g. "gzip": smaller files, slower to write and read

    def validate(self):
        if self.chunk_rows < 1 or self.rows_per_shard < self.chunk_rows or self.rows_per_shard % self.chunk_rows:
            raise ValueError(f"WriteOptions: rows_per_shard={self.rows_per_shard} must be a positive multiple of "
                             f"chunk_rows={self.chunk_rows}")
        return self


class ShardWriter:
    """Appends batches to ``folder/part-*.h5``, a whole chunk at a time; ``close()`` returns the shard paths."""

    def __init__(self, folder, layout, options=WriteOptions()):
        self.folder, self.layout, self.options = folder, layout.validate(), options.validate()
        os.makedirs(folder, exist_ok=True)
        T, D, S = layout.widths
        c = options.chunk_rows
        self.buf = Batch(np.empty((c, T) if T else c, np.float32), np.empty((c, D), np.float32),
                         np.empty((c, S), np.int64))
        self.fill, self.file, self.file_rows, self.paths, self.rows = 0, None, 0, [], 0

    def append(self, batch):
        """Add the rows of ``batch``."""
        done = 0
        while done < batch.rows:
            k = min(batch.rows - done, self.options.chunk_rows - self.fill)
            for dst, src in zip(self.buf.arrays(), batch.arrays()):
                dst[self.fill:self.fill + k] = src[done:done + k]
            self.fill += k
            done += k
            if self.fill == self.options.chunk_rows:
                self._flush()

    def close(self):
        """Write what is buffered, finish the last shard, and return the paths of all shards written."""
        if self.fill:
            self._flush()
        self._finish()
        return self.paths

    def _flush(self):
        if self.file is None:
            self._start()
        n, k = self.file_rows, self.fill
        for name, src in zip(("label", "dense", "sparse"), self.buf.arrays()):
            ds = self.file[name]
            ds.resize(n + k, axis=0)
            if src.size:
                ds.write_direct(src, np.s_[0:k], np.s_[n:n + k])
        self.file_rows, self.rows, self.fill = n + k, self.rows + k, 0
        if self.file_rows == self.options.rows_per_shard:
            self._finish()

    def _start(self):
        path = os.path.join(self.folder, f"part-{len(self.paths):05d}.h5")
        self.file = h5py.File(path + ".tmp", "w")
        lay, c = self.layout, self.options.chunk_rows
        for name, src in zip(("label", "dense", "sparse"), self.buf.arrays()):
            width = src.shape[1:]
            # HDF5 chunks must be non-empty: a role with no columns (Avazu's dense) gets an unbounded width.
            self.file.create_dataset(name, shape=(0,) + width, maxshape=(None,) + tuple(w or None for w in width),
                                     dtype=src.dtype, chunks=(c,) + tuple(max(w, 1) for w in width),
                                     compression=self.options.compression)
        a = self.file.attrs
        a["format"], a["version"], a["chunk_rows"] = FORMAT, VERSION, c
        a["label_names"], a["dense_names"] = json.dumps(list(lay.label_names)), json.dumps(list(lay.dense_names))
        a["sparse_names"] = json.dumps(list(lay.sparse_names))
        a["sparse_hotness"] = json.dumps(list(lay.hotness or (1,) * len(lay.sparse_names)))
        a["meta"] = json.dumps(lay.meta)
        self.paths.append(path)

    def _finish(self):
        if self.file is None:
            return
        self.file.attrs["n_rows"] = self.file_rows
        self.file.close()
        os.replace(self.paths[-1] + ".tmp", self.paths[-1])
        self.file, self.file_rows = None, 0


@dataclass(frozen=True)
class ShardInfo:
    """What a shard's attributes say, checked against its datasets."""
    path: str
    n_rows: int
    chunk_rows: int
    layout: ShardLayout


def _attr(f, name, path):
    if name not in f.attrs:
        raise ShardError(f"{path}: attribute {name!r} is missing, so this is not a complete gpuemb shard; "
                         "convert the source again")
    return f.attrs[name]


def open_shard(path):
    """``(h5py.File, ShardInfo)`` for a shard, after checking it is complete; a ShardError names what is wrong."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ShardError(f"{path}: no such shard file; check the path, or run the converter")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ShardError(f"{path}: cannot be opened as HDF5 ({e}); the file is truncated or corrupt, "
                         "so convert the source again") from None
    try:
        if _attr(f, "format", path) != FORMAT:
            raise ShardError(f"{path}: format is {f.attrs['format']!r}, not {FORMAT!r}")
        layout = ShardLayout(*(tuple(json.loads(_attr(f, k, path))) for k in
                               ("label_names", "dense_names", "sparse_names", "sparse_hotness")),
                             meta=json.loads(f.attrs.get("meta", "{}")))
        info = ShardInfo(path, int(_attr(f, "n_rows", path)), int(_attr(f, "chunk_rows", path)), layout)
        for name, width in zip(("label", "dense", "sparse"), layout.widths):
            if name not in f:
                raise ShardError(f"{path}: dataset {name!r} is missing; convert the source again")
            shape = f[name].shape
            if shape[0] != info.n_rows or shape[1:] != ((width,) if name != "label" or width else ()):
                raise ShardError(f"{path}: dataset {name!r} has shape {shape}, but the attributes say "
                                 f"{info.n_rows} rows of width {width}; the shard is truncated or corrupt")
    except (OSError, KeyError, ValueError) as e:
        f.close()
        if isinstance(e, ShardError):
            raise
        raise ShardError(f"{path}: cannot be read ({type(e).__name__}: {e}); the file is corrupt") from None
    return f, info


def list_shards(location, split=None):
    """The shard paths at ``location``: a shard, a folder of shards, or an output folder plus ``split``."""
    location = os.fspath(location)
    if os.path.isfile(location):
        return [location]
    folder = os.path.join(location, split) if split else location
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), "part-*.h5")))
    if not paths:
        raise ShardError(f"{folder}: holds no part-*.h5 shards; run the converter or check the path")
    return paths


class ShardSource:
    """Blocks of rows for the loader: block i is one HDF5 chunk of one shard, always read whole."""

    def __init__(self, paths):
        paths = list_shards(paths) if isinstance(paths, (str, os.PathLike)) else list(paths)
        self.files, self.infos = [], []
        try:
            for p in paths:
                f, info = open_shard(p)
                self.files.append(f)
                self.infos.append(info)
                if info.layout != self.infos[0].layout:
                    raise SchemaError(f"{p}: its columns differ from those of {self.infos[0].path}; "
                                      "load shards of one data set together")
        except Exception:
            self.close()
            raise
        self.layout = self.infos[0].layout
        blocks = [(s, a, min(a + info.chunk_rows, info.n_rows))
                  for s, info in enumerate(self.infos) for a in range(0, info.n_rows, info.chunk_rows)]
        self.blocks = np.array(blocks, np.int64).reshape(-1, 3)
        self.block_sizes = self.blocks[:, 2] - self.blocks[:, 1]
        self.n_rows = int(self.block_sizes.sum())

    def read_block(self, i):
        """The rows of block ``i`` as a Batch of fresh arrays."""
        s, a, b = (int(v) for v in self.blocks[i])
        f = self.files[s]
        out = []
        try:
            for name in ("label", "dense", "sparse"):
                ds = f[name]
                arr = np.empty((b - a,) + ds.shape[1:], ds.dtype)
                if arr.size:
                    ds.read_direct(arr, np.s_[a:b])
                out.append(arr)
        except (OSError, ValueError) as e:
            raise ShardError(f"{self.infos[s].path}: rows {a}:{b} of {name!r} cannot be read ({e}); "
                             "the file is truncated or corrupt, so convert the source again") from None
        return Batch(*out)

    def close(self):
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
