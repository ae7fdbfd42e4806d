"""HDF5 shards: the layout the converter and the generator write and the loader reads.

A shard ``<out>/<split>/part-00000.h5`` is plain HDF5, readable with h5py or any HDF5 tool:

======== ======= ==================== ===========================================
dataset  dtype   shape                chunks
======== ======= ==================== ===========================================
label    float32 ``[N]`` or ``[N, T]``  ``(chunk_rows,)`` or ``(chunk_rows, T)``
dense    float32 ``[N, n_dense]``       ``(chunk_rows, n_dense)``
sparse   int64   ``[N, S]``             ``(chunk_rows, S)``
======== ======= ==================== ===========================================

and ``checksums``, uint32 ``[n_chunks, 3]``: the CRC32 of chunk i's label, dense and sparse bytes (rows
``i * chunk_rows`` up to ``min((i + 1) * chunk_rows, N)``, in C order), as snapshots keep theirs.

File attributes: ``format`` = "gpuemb-shard", ``version`` = 2 (3 where some feature is jagged), ``n_rows``,
``chunk_rows``, and JSON strings ``label_names``, ``dense_names``, ``sparse_names``, ``sparse_hotness`` (ids per
sparse feature: feature k owns ``hotness[k]`` consecutive columns of ``sparse``, so ``S = sum(hotness)``; 0 marks a
jagged feature, whose bags of any length are in the datasets of :mod:`gpuemb.io.shard_bags`), ``meta`` (the schema,
sources, split and options that made it) and ``attr_crcs`` (the CRC32 of each of those attributes and of the
checksum table, see :mod:`gpuemb.io.shard_attrs`). Each role is its own dataset, so a reader takes only the columns
it needs.

A shard is written to ``part-*.h5.tmp`` and renamed when complete, so a file named ``.h5`` is never half
written by a run that stopped. What a disk or a copy can still damage is caught: opening checks every attribute's
form and checksum, the checksum table, and each dataset's shape and dtype; reading a block checks its chunk's
checksums, so a flipped byte stops a run before its rows reach the model. Every such error, and h5py's own, is a
:class:`~gpuemb.io.errors.ShardError` that names the file, and the attribute or the dataset and chunk.

The converter lists a split's shards, with each one's size and whole-file CRC32, in the folder's
``manifest.json`` (:mod:`gpuemb.io.dataset_manifest`): :class:`ShardSource` checks a shard against it before h5py
opens it, and :func:`list_shards` refuses a folder missing a listed shard or holding one not listed.

Version 1 shards (before checksums) are still read, with a warning: they were written by the same converter, and a
large data set takes hours to convert again, which the warning suggests.
"""
import glob
import json
import os
import warnings
from dataclasses import dataclass, field

import h5py
import numpy as np

from gpuemb.io import dataset_manifest, shard_attrs as attrs
from gpuemb.io import shard_bags
from gpuemb.io.bags import JAGGED
from gpuemb.io.batch import Batch
from gpuemb.io.checksum import array_crcs, first_mismatch
from gpuemb.io.errors import DataError, SchemaError, ShardError, UncheckedShardWarning, UnlistedShardWarning
from gpuemb.io.file_lock import Busy, DirLock
from gpuemb.io.h5output import H5Output

FORMAT, VERSION = "gpuemb-shard", 3
JAGGED_VERSION = 3  # the version that brought jagged features; a shard without them is still written as 2
DATASETS = ("label", "dense", "sparse")
_NAMES = ("label_names", "dense_names", "sparse_names")
_READ_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class ShardLayout:
    """The columns of a shard: names per role, and the hotness of each sparse feature (1 for one-hot, 0 for a
    jagged feature: bags of any length)."""
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

    @property
    def jagged_names(self):
        """The jagged features, in order: the columns of a batch's ``bags.lengths``."""
        return tuple(n for n, h in zip(self.sparse_names, self.hotness) if h == JAGGED)

    @property
    def datasets(self):
        """The datasets of a shard of this layout, in the order of the checksum table's columns."""
        return DATASETS + (shard_bags.DATASETS if self.jagged_names else ())


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


def hold_folder(folder):
    """A DirLock on ``folder`` (made if missing), or a DataError where another conversion holds it."""
    try:
        return DirLock(folder)
    except Busy:
        raise DataError(f"{folder}: another conversion is writing shards there; wait for it to end, or "
                        "convert into another folder") from None
    except OSError as e:
        raise DataError(f"{folder}: cannot hold shards ({e.strerror}); convert into a writable folder") from None


class ShardWriter:
    """Appends batches to ``folder/part-*.h5``, a whole chunk at a time; ``close()`` returns the shard paths
    (``paths``, with the rows of each in ``counts``). It holds a lock on ``folder`` until then (``file_lock.py``):
    a second writer there is refused with one line."""

    def __init__(self, folder, layout, options=WriteOptions()):
        self.folder, self.layout, self.options = folder, layout.validate(), options.validate()
        names = zip(_NAMES, (layout.label_names, layout.dense_names, layout.sparse_names))
        self.texts = {"format": FORMAT, **{k: json.dumps(list(v)) for k, v in names},
                      "sparse_hotness": json.dumps(list(layout.hotness or (1,) * len(layout.sparse_names))),
                      "meta": json.dumps(layout.meta)}
        attrs.check_texts(self.texts)  # before a row is written: a text too long for an attribute cannot be stored
        self.lock = hold_folder(folder)  # two writers of one folder would write the same part files over each other
        T, D, S = layout.widths
        c = options.chunk_rows
        self.buf = Batch(np.empty((c, T) if T else c, np.float32), np.empty((c, D), np.float32),
                         np.empty((c, S), np.int64))
        self.bags = shard_bags.BagBuffer(layout.jagged_names, c) if layout.jagged_names else None
        self.fill, self.file, self.file_rows, self.paths, self.rows, self.sums = 0, None, 0, [], 0, []
        self.counts = []
        self.out = None  # the H5Output of the shard being written

    def append(self, batch):
        """Add the rows of ``batch`` (with ``bags`` for the jagged features, where the layout has any)."""
        if (batch.bags is None) != (self.bags is None) or (
                batch.bags is not None and batch.bags.lengths.shape[1] != len(self.bags.names)):
            raise DataError(f"{self.folder}: a batch with {0 if batch.bags is None else batch.bags.lengths.shape[1]} "
                            f"jagged features for shards of {len(self.layout.jagged_names)}; give bags for exactly "
                            "the features of hotness 0")
        done = 0
        while done < batch.rows:
            k = min(batch.rows - done, self.options.chunk_rows - self.fill)
            for dst, src in zip(self.buf.arrays(), batch.arrays()):
                dst[self.fill:self.fill + k] = src[done:done + k]
            if self.bags is not None:
                self.bags.add(batch.bags, done, done + k, self.fill, self.folder)
            self.fill += k
            done += k
            if self.fill == self.options.chunk_rows:
                self._flush()

    def close(self):
        """Write what is buffered, finish the last shard, and return the paths of all shards written."""
        if self.fill:
            self._flush()
        self._finish()
        self.lock.release()
        return self.paths

    def _flush(self):
        if self.file is None:
            self._start()
        n, k = self.file_rows, self.fill
        for name, src in zip(DATASETS, self.buf.arrays()):
            ds = self.file[name]
            ds.resize(n + k, axis=0)
            if src.size:
                ds.write_direct(src, np.s_[0:k], np.s_[n:n + k])
        jagged = self.bags.flush(self.file, n, k) if self.bags is not None else ()
        self._check()
        self.sums.append(array_crcs([*(src[:k] for src in self.buf.arrays()), *jagged]))
        self.file_rows, self.rows, self.fill = n + k, self.rows + k, 0
        if self.file_rows == self.options.rows_per_shard:
            self._finish()

    def _start(self):
        path = os.path.join(self.folder, f"part-{len(self.paths):05d}.h5")
        try:  # HDF5 writes through a file that never fails it, so a full disk cannot crash it (h5output.py)
            self.out = H5Output(path + ".tmp", path)
        except OSError as e:
            raise DataError(f"{path}: cannot be created ({e.strerror}); convert into a writable folder") from None
        self.file = self.out.file
        c = self.options.chunk_rows
        for name, src in zip(DATASETS, self.buf.arrays()):
            width = src.shape[1:]
            # HDF5 chunks must be non-empty: a role with no columns (Avazu's dense) gets an unbounded width.
            self.file.create_dataset(name, shape=(0,) + width, maxshape=(None,) + tuple(w or None for w in width),
                                     dtype=src.dtype, chunks=(c,) + tuple(max(w, 1) for w in width),
                                     compression=self.options.compression)
        if self.bags is not None:
            self.bags.create(self.file, c, self.options.compression)
        a = self.file.attrs
        a["version"], a["chunk_rows"] = JAGGED_VERSION if self.bags is not None else 2, c
        for name, text in self.texts.items():
            attrs.put_text(a, name, text)
        self.paths.append(path)

    def _finish(self):
        if self.file is None:
            return
        table = np.array(self.sums, np.uint32).reshape(-1, len(self.layout.datasets))
        self.file.create_dataset("checksums", data=table)
        if self.bags is not None:
            self.bags.finish(self.file)
        self.file.attrs["n_rows"] = self.file_rows
        attrs.put_text(self.file.attrs, attrs.ATTR_CRCS, attrs.record_crcs(self.file.attrs, array_crcs([table])[0]))
        self._check(self.out.close)
        os.replace(self.paths[-1] + ".tmp", self.paths[-1])
        self.counts.append(self.file_rows)
        self.file, self.out, self.file_rows, self.sums = None, None, 0, []

    def _check(self, step=None):
        """Run ``step`` (by default: check for a failed write); where a write of the shard failed (a full disk),
        close and remove it and raise a DataError."""
        try:
            (step or self.out.check)()
        except OSError as e:
            self.out.close(check=False)
            os.remove(self.paths.pop() + ".tmp")
            self.file = self.out = None
            self.lock.release()
            raise DataError(f"{e.strerror}; free space on that disk, or convert into a folder on a larger one "
                            "(the shards before it are whole)") from None


@dataclass(frozen=True)
class ShardInfo:
    """What a shard's attributes say, checked against its datasets; ``checksums`` is None in a version 1 shard."""
    path: str
    n_rows: int
    chunk_rows: int
    layout: ShardLayout
    checksums: np.ndarray | None = field(default=None, repr=False, compare=False)
    bag_starts: np.ndarray | None = field(default=None, repr=False, compare=False)  # version 3, jagged features


def _read_layout(f, path, version):
    """The ShardLayout of the attributes, each checked for its form."""
    names = [tuple(attrs.json_value(f, k, path, attrs.names, "a JSON list of column names")) for k in _NAMES]
    low = 0 if version >= JAGGED_VERSION else 1  # hotness 0, a jagged feature, came with version 3
    hotness = tuple(attrs.json_value(f, "sparse_hotness", path, lambda v: attrs.counts(v, low),
                                     f"a JSON list of integers >= {low}"))
    meta = attrs.json_value(f, "meta", path, lambda v: isinstance(v, dict), "a JSON object") \
        if "meta" in f.attrs else {}
    try:
        return ShardLayout(*names, hotness, meta=meta).validate()
    except ValueError as e:
        raise ShardError(f"{path}: attributes 'label_names' or 'sparse_hotness' do not fit ({e}); the file is "
                         f"corrupt, so {attrs.FIX}") from None


def _dataset(f, name, path, where=""):
    """Dataset ``name``, or a ShardError if it is missing or is something else (a group, a named type)."""
    if not isinstance(f.get(name), h5py.Dataset):
        raise ShardError(f"{path}: dataset {name!r} is missing{where}; {attrs.FIX}")
    return f[name]


def _read_checksums(f, path, n_rows, chunk_rows, layout, version):
    """The checksum table ``[n_chunks, datasets]``, checked for its shape and against the attributes' checksums."""
    want = (-(-n_rows // chunk_rows), len(layout.datasets))
    ds = _dataset(f, "checksums", path, f" from a version {version} shard")
    if ds.shape != want or ds.dtype != np.uint32:
        raise ShardError(f"{path}: dataset 'checksums' is {ds.dtype} {ds.shape}, but {n_rows} rows in chunks of "
                         f"{chunk_rows} need uint32 {want}; the file is corrupt, so {attrs.FIX}")
    table = ds[()]
    attrs.check_crcs(f, path, array_crcs([table])[0])
    return table


def _read_info(f, path):
    """The ShardInfo of an open shard: attributes, checksum table and datasets checked against each other."""
    fmt = attrs.raw(f, "format", path)
    if not (isinstance(fmt, str) and fmt == FORMAT):
        raise ShardError(f"{path}: attribute 'format' is {attrs.show(fmt)}, not {FORMAT!r}, so this is not a gpuemb "
                         "shard; give the converter's output")
    version = attrs.integer(f, "version", path, 1)
    if version > VERSION:
        raise ShardError(f"{path}: attribute 'version' is {version}, but this gpuemb reads versions 1 to {VERSION}; "
                         f"read it with the gpuemb that wrote it, or {attrs.FIX}")
    if version < 2 and (attrs.ATTR_CRCS in f.attrs or "checksums" in f):
        raise ShardError(f"{path}: attribute 'version' is {version}, but the shard carries checksums, which came with "
                         f"version 2; the attribute is corrupt, so {attrs.FIX}")
    layout = _read_layout(f, path, version)
    if (version >= JAGGED_VERSION) != bool(layout.jagged_names):
        raise ShardError(f"{path}: attribute 'version' is {version}, but the shard has "
                         f"{len(layout.jagged_names)} jagged features, which version {JAGGED_VERSION} and only it "
                         f"holds; the attribute is corrupt, so {attrs.FIX}")
    n_rows, chunk_rows = attrs.integer(f, "n_rows", path, 0), attrs.integer(f, "chunk_rows", path, 1)
    table = _read_checksums(f, path, n_rows, chunk_rows, layout, version) if version >= 2 else None
    for name, width, dtype in zip(DATASETS, layout.widths, (np.float32, np.float32, np.int64)):
        ds = _dataset(f, name, path)
        shape = (n_rows,) + ((width,) if name != "label" or width else ())
        if ds.shape != shape or ds.dtype != dtype:
            raise ShardError(f"{path}: dataset {name!r} is {ds.dtype} {ds.shape}, but the attributes say "
                             f"{np.dtype(dtype)} {shape}; the shard is truncated or corrupt, so {attrs.FIX}")
    starts = shard_bags.read_starts(f, path, n_rows, chunk_rows, len(layout.jagged_names), _dataset) \
        if layout.jagged_names else None
    return ShardInfo(path, n_rows, chunk_rows, layout, table, starts)


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
        return f, _read_info(f, path)
    except ShardError:
        f.close()
        raise
    except _READ_ERRORS as e:  # h5py's, from the file's own structures
        f.close()
        raise ShardError(f"{path}: cannot be read ({type(e).__name__}: {e}); the file is corrupt, "
                         f"so {attrs.FIX}") from None


def is_hdf5(path):
    """Whether the file at ``path`` starts as an HDF5 file does (as every shard does): a cheap test that tells a
    shard from a raw data file, without parsing it."""
    try:
        with open(path, "rb") as f:
            return f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError as e:
        raise ShardError(f"{path}: cannot be read ({e.strerror}); check the path and its permissions") from None


def list_shards(location, split=None):
    """The shard paths at ``location``: a shard, a folder of shards, or an output folder plus ``split``. A folder
    with a manifest must hold exactly the shards it lists; one without (converted before manifests) is globbed."""
    location = os.fspath(location)
    if os.path.isfile(location):
        return [location]
    folder = os.path.join(location, split) if split else location
    listing = dataset_manifest.read(folder)
    paths = dataset_manifest.listed(folder, listing) if listing else sorted(
        glob.glob(os.path.join(glob.escape(folder), "part-*.h5")))
    if not paths:
        raise ShardError(f"{folder}: holds no part-*.h5 shards; run the converter or check the path")
    return paths


class ShardSource:
    """Blocks of rows for the loader: block i is one HDF5 chunk of one shard, always read whole. Opening checks
    each shard's whole-file CRC32 against its folder's manifest first (:mod:`gpuemb.io.dataset_manifest`)."""

    def __init__(self, paths):
        paths = list_shards(paths) if isinstance(paths, (str, os.PathLike)) else list(paths)
        self.files, self.infos = [], []
        check = dataset_manifest.ShardCheck()
        check(paths)  # before h5py parses a byte of them
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
        if check.unlisted:
            warnings.warn(f"{len(check.unlisted)} shard folders, first {check.unlisted[0]}, have no "
                          f"{dataset_manifest.NAME} (converted before manifests), so a missing, extra or swapped "
                          "shard there goes unnoticed; convert the source again to have the folder checked",
                          UnlistedShardWarning, stacklevel=2)
        unchecked = [info.path for info in self.infos if info.checksums is None]
        if unchecked:
            warnings.warn(f"{len(unchecked)} of {len(self.infos)} shards, first {unchecked[0]}, are version 1 and "
                          "carry no checksums, so damage to them goes unnoticed; convert the source again to have "
                          "every chunk checked", UncheckedShardWarning, stacklevel=2)
        self.layout = self.infos[0].layout
        blocks = [(s, a, min(a + info.chunk_rows, info.n_rows))
                  for s, info in enumerate(self.infos) for a in range(0, info.n_rows, info.chunk_rows)]
        self.blocks = np.array(blocks, np.int64).reshape(-1, 3)
        self.block_sizes = self.blocks[:, 2] - self.blocks[:, 1]
        self.n_rows = int(self.block_sizes.sum())

    def read_block(self, i):
        """The rows of block ``i`` as a Batch of fresh arrays, checked against their chunk's checksums."""
        s, a, b = (int(v) for v in self.blocks[i])
        f, info = self.files[s], self.infos[s]
        out = []
        try:
            for name in DATASETS:
                ds = f[name]
                arr = np.empty((b - a,) + ds.shape[1:], ds.dtype)
                if arr.size:
                    ds.read_direct(arr, np.s_[a:b])
                out.append(arr)
            k, name = a // info.chunk_rows, "bag_values"
            bags = shard_bags.read_block(f, info.bag_starts, a, b, k) if info.bag_starts is not None else None
        except _READ_ERRORS as e:
            raise ShardError(f"{info.path}: rows {a}:{b} of {name!r} cannot be read ({e}); "
                             f"the file is truncated or corrupt, so {attrs.FIX}") from None
        checked = out + ([bags.lengths, bags.values] if bags is not None else [])
        bad = None if info.checksums is None else first_mismatch(checked, info.layout.datasets, info.checksums[k])
        if bad:
            raise ShardError(f"{info.path}: dataset {bad[0]!r}, chunk {k} (rows {a}:{b}) has checksum {bad[1]:#010x}, "
                             f"but the shard recorded {bad[2]:#010x}; the file is corrupt, so {attrs.FIX}")
        if bags is not None:
            shard_bags.check_block(bags, info.path, a, b, k)
        return Batch(*out, bags)

    def close(self):
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
