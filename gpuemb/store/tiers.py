"""Row storage of one tier: device memory, pinned host memory, or an HDF5 file (docs/design.md, "The embedding store").

Every tier stores rows of ``width`` elements of ``dtype`` (a row is ``[weights | optimizer state]``, laid out by
the store) in slabs of ``slab_rows`` rows, grown by ``add_slab()``, with one API: ``read(rows)``,
``write(rows, values)``, ``capacity``, ``nbytes``, ``close()``, and ``bytes_read``/``bytes_written`` counters.
Rows never written read as zeros. Rows within one ``write`` must be distinct.
"""
import contextlib
import os
import re
from dataclasses import dataclass

import h5py
import numpy as np

from gpuemb.autograd import backend
from gpuemb.io import file_lock
from gpuemb.kernels.gather import gather_rows

from .errors import SsdFileError
from .slab import grown_to

FORMAT, VERSION = "gpuemb-ssd-tier", 1
_GROUP_BYTES = 64 << 20  # the SSD tier gathers from at most this many bytes of chunks at a time


@dataclass(frozen=True)
class TierSpec:
    """The rows of a tier: ``width`` elements of ``dtype``, ``slab_rows`` per slab, ``chunk_rows`` per HDF5 chunk."""
    width: int
    dtype: str = "float32"
    slab_rows: int = 1 << 16
    chunk_rows: int = 256  # SSD only: each touched chunk is read whole; smaller ones read fewer bytes, more calls

    def validate(self):
        if self.width < 1 or self.slab_rows < 1:
            raise ValueError(f"TierSpec: width={self.width} and slab_rows={self.slab_rows} must be positive")
        if self.chunk_rows < 1 or self.slab_rows % self.chunk_rows:
            raise ValueError(f"TierSpec: chunk_rows={self.chunk_rows} must divide slab_rows={self.slab_rows}; "
                             "powers of two for both always fit")
        if np.dtype(self.dtype).kind not in "fiu":
            raise ValueError(f"TierSpec: dtype={self.dtype!r} is not a numeric dtype; use e.g. float32 or float16")
        return self

    @property
    def row_bytes(self):
        return self.width * np.dtype(self.dtype).itemsize


def _gather(table, idx):
    """``table[idx]`` by the gather kernel, moving rows as unsigned integers: numba's CPU target has no float16."""
    bits = np.dtype(f"u{table.dtype.itemsize}")
    return gather_rows(table.view(bits), idx).view(table.dtype)


class Tier:
    """What every tier shares: the spec, the argument checks, and the byte counters.

    ``stores_steps``: whether the tier keeps each row's update count beside the row (the SSD tier does, so its
    level keeps no per-slot array of them in memory); then ``read(rows, with_steps=True)`` returns ``(rows,
    steps)`` and ``write(rows, values, steps=...)`` stores them. ``sync()`` waits until every write has reached
    the tier's storage and raises the error of any that failed (only the SSD tier writes in the background).
    """
    stores_steps = False

    def __init__(self, spec, name):
        self.spec, self.name = spec.validate(), name
        self.slab_rows, self.width, self.dtype = spec.slab_rows, spec.width, np.dtype(spec.dtype)
        self.bytes_read = self.bytes_written = 0

    @property
    def nbytes(self):
        return self.capacity * self.spec.row_bytes

    def _check_rows(self, rows, op):
        """Shapes always; the range of host row ids only. Device row ids come from the level's ``DeviceSlots``,
        below the capacity by construction (it adds slabs before handing slots out), so no read checks them."""
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise ValueError(f"{self.name}.{op}: want 1-D integer row ids, got {rows.dtype} of shape {rows.shape}")
        if not backend.is_device_array(rows) and rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.capacity):
            raise IndexError(f"{self.name}.{op}: row ids span [{int(rows.min())}, {int(rows.max())}], outside the "
                             f"capacity of {self.capacity} rows ({self.capacity // self.slab_rows} slabs of "
                             f"{self.slab_rows}); take row ids from this tier's SlabAllocator")

    def _check_values(self, values, n, op):
        if values.shape != (n, self.width) or values.dtype != self.dtype:
            raise ValueError(f"{self.name}.{op}: want values of shape ({n}, {self.width}) and dtype {self.dtype} "
                             f"for {n} rows, got {values.shape} {values.dtype}; cast or reshape them first")

    def sync(self):
        """Nothing to wait for: this tier writes in the caller's thread."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _SlabTier(Tier):
    """Rows in a list of ``[slab_rows, width]`` arrays; a subclass says where they live."""

    def __init__(self, spec, name):
        super().__init__(spec, name)
        self.slabs = []

    @property
    def capacity(self):
        return len(self.slabs) * self.slab_rows

    def add_slab(self):
        """Add ``slab_rows`` zeroed rows."""
        self.slabs.append(self._new_slab())

    def _by_slab(self, rows):
        """``(slab, positions in rows, offsets in the slab)`` for each slab that ``rows`` touch."""
        xp = backend.get_array_module(rows)
        slab = rows // self.slab_rows
        order = xp.argsort(slab)
        ends = np.cumsum(backend.to_host(xp.bincount(slab, minlength=len(self.slabs))))
        start = 0
        for s, end in enumerate(ends.tolist()):
            if end > start:
                sel = order[start:end]
                yield s, sel, rows[sel] - s * self.slab_rows
            start = end

    def read(self, rows, out=None):
        """Rows ``[n, width]``, into ``out`` when given (e.g. a pinned staging buffer)."""
        rows = self._index(rows)
        self._check_rows(rows, "read")
        n = rows.shape[0]
        if out is None:
            out = self._empty((n, self.width))
        self._check_values(out, n, "read(out=)")
        for s, sel, off in self._by_slab(rows):
            out[sel] = _gather(self.slabs[s], off)
        self.bytes_read += n * self.spec.row_bytes
        return out

    def write(self, rows, values, where=None):
        """Store ``values[i]`` as row ``rows[i]``; with a host mask ``where``, only where it is set."""
        rows = self._index(rows)
        if where is not None:
            rows, values = rows[where], backend.to_host(values)[where]
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        values = self._values(values)
        for s, sel, off in self._by_slab(rows):
            self.slabs[s][off] = values[sel]
        self.bytes_written += rows.shape[0] * self.spec.row_bytes

    def close(self):
        self.slabs = []


class DeviceTier(Tier):
    """Rows in one array of the backend's (CuPy on a GPU, NumPy on the CPU), grown a slab at a time.

    One array rather than a list of slabs, so a read or write is one gather or scatter whatever the rows touch:
    splitting rows by slab needs the count per slab on the host, a read per call. The array grows by a quarter at
    least (``grown_to``), so adding slabs copies each row O(1) times; the price is a copy while it grows, up to
    2.25 times the rows for a moment. A bounded level (a cache, ``max_rows``) stops growing at its bound.
    """

    def __init__(self, spec):
        super().__init__(spec, "DeviceTier")
        self.rows = backend.xp.zeros((0, self.width), self.dtype)
        self._capacity = 0

    @property
    def capacity(self):
        return self._capacity

    def add_slab(self):
        """Add ``slab_rows`` zeroed rows."""
        self._capacity += self.slab_rows
        self.rows = grown_to(self.rows, self._capacity)

    def read(self, rows, out=None):
        """Rows ``[n, width]``, into ``out`` when given."""
        rows = backend.to_device(rows)
        self._check_rows(rows, "read")
        got = _gather(self.rows, rows)
        if out is not None:
            self._check_values(out, rows.shape[0], "read(out=)")
            out[...] = got
        self.bytes_read += rows.shape[0] * self.spec.row_bytes
        return got if out is None else out

    def write(self, rows, values, where=None):
        """Store ``values[i]`` as row ``rows[i]``; with a mask ``where``, only where it is set (the others keep
        their rows, read back and written again: no count of the set ones leaves the device)."""
        rows = backend.to_device(rows)
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        values = backend.to_device(values)
        if where is not None:
            values = backend.xp.where(where[:, None], values, self.rows[rows])
        self.rows[rows] = values
        self.bytes_written += rows.shape[0] * self.spec.row_bytes

    def close(self):
        self.rows = backend.xp.zeros((0, self.width), self.dtype)
        self._capacity = 0


class HostTier(_SlabTier):
    """Rows in slabs of pinned host memory, so copies up to the device can be asynchronous; NumPy on the CPU."""

    def __init__(self, spec):
        super().__init__(spec, "HostTier")

    def _new_slab(self):
        slab = backend.pinned_empty((self.slab_rows, self.width), self.dtype)
        slab.fill(0)
        return slab

    def _empty(self, shape):
        return np.empty(shape, self.dtype)

    def _index(self, rows):
        return backend.to_host(rows)

    def _values(self, values):
        return backend.to_host(values)


class SsdTier(Tier):
    """Rows in one chunked, resizable HDF5 dataset ``rows [capacity, width]`` at ``path``, created afresh.

    Reads and writes move whole chunks (``read_direct_chunk``/``write_direct_chunk``) and gather or scatter in
    NumPy: h5py's fancy indexing was about 30 times slower (docs/design.md, "The embedding store"), and a
    chunk-aligned ``read_direct`` cost about 100 us a call against 7 us for the raw chunk. Raw chunk I/O needs every
    chunk to exist and no filter, so chunks are allocated when a slab is added and the dataset is not compressed. A
    write reads each chunk it covers in part, changes its rows, and writes it back; a chunk it covers entirely is
    written without a read, so filling fresh slots in order (populating a table) costs one write per chunk.

    While open, the tier holds a lock on ``<path>.lock`` that keeps other processes off the file (``_lock``). A
    write the disk refuses raises SsdFileError, and so does every later call.
    """

    def __init__(self, path, spec):
        super().__init__(spec, f"SsdTier({os.fspath(path)})")
        self.path = os.fspath(path)
        self._lock = _lock(self.path)  # before h5py touches the file
        self._broken = None  # the error of a failed write: later calls raise it again and touch no h5py handle
        try:
            self.file = h5py.File(self.path, "w")
        except OSError as e:
            _unlock(self._lock, self.path)
            raise OSError(f"SsdTier: cannot create the HDF5 file {self.path} ({e}); "
                          "pass a path in a writable folder that exists") from None
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        self.ds = self.file.create_dataset("rows", shape=(0, spec.width), maxshape=(None, spec.width),
                                           dtype=self.dtype, chunks=(spec.chunk_rows, spec.width), dcpl=dcpl)
        a = self.file.attrs
        a["format"], a["version"], a["slab_rows"], a["chunk_rows"] = FORMAT, VERSION, spec.slab_rows, spec.chunk_rows
        self._capacity = 0  # kept here, so that no call after a failed write asks the dataset its shape

    @property
    def capacity(self):
        return self._capacity

    @property
    def chunk_bytes(self):
        return self.spec.chunk_rows * self.spec.row_bytes

    def add_slab(self):
        """Grow the dataset by ``slab_rows`` zeroed rows (written to the disk now: chunks are allocated early)."""
        self._check_usable()
        try:
            self.ds.resize(self.capacity + self.slab_rows, axis=0)
        except (OSError, RuntimeError) as e:
            self._fail(e, f"writing {self.slab_rows * self.spec.row_bytes:,} bytes (a slab of rows)")
        self._capacity += self.slab_rows

    def _check_usable(self):
        if self._broken is not None:
            raise self._broken

    def _fail(self, e, what):
        """Raise a one-line SsdFileError for h5py's failed write ``e`` (its message spans lines, and closing the file
        raises a second one), and refuse every later call: HDF5 may hold half-written state."""
        found = re.search(r"errno = (\d+), error message = '([^']*)'", str(e))
        reason = f"{found[2]}, errno {found[1]}" if found else (getattr(e, "strerror", None) or str(e).splitlines()[0])
        self._broken = SsdFileError(f"{self.path}: {what} failed ({reason}); free space on that disk, or put the "
                                    "tables' files on a larger one (tools/train.py --ssd-dir)")
        raise self._broken from None

    def _groups(self, rows):
        """``(touched chunk ids, positions in rows, rows of the chunks' buffer)`` per group of touched chunks."""
        cr = self.spec.chunk_rows
        touched, inv = np.unique(rows // cr, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        per = max(1, _GROUP_BYTES // self.chunk_bytes)
        starts = np.arange(0, touched.size, per)
        ends = np.searchsorted(inv[order], np.append(starts, touched.size))
        for g, g0 in enumerate(starts.tolist()):
            sel = order[ends[g]:ends[g + 1]]
            yield touched[g0:g0 + per].tolist(), sel, (inv[sel] - g0) * cr + rows[sel] % cr

    def _read_chunks(self, chunks, skip=None):
        """The rows of ``chunks`` one after another; the rows of chunk j are left unset where ``skip[j]``."""
        cr = self.spec.chunk_rows
        buf = np.empty((len(chunks) * cr, self.width), self.dtype)
        raw, nbytes, dsid = buf.reshape(-1).view(np.uint8), self.chunk_bytes, self.ds.id  # hoisted: per-chunk cost
        wanted = range(len(chunks)) if skip is None else np.flatnonzero(~skip).tolist()
        for j in wanted:
            dsid.read_direct_chunk((chunks[j] * cr, 0), out=raw[j * nbytes:(j + 1) * nbytes])
        self.bytes_read += len(wanted) * nbytes
        return buf

    def read(self, rows, out=None):
        """Rows ``[n, width]`` as NumPy, into ``out`` when given."""
        self._check_usable()
        rows = backend.to_host(rows)
        self._check_rows(rows, "read")
        if out is None:
            out = np.empty((rows.shape[0], self.width), self.dtype)
        self._check_values(out, rows.shape[0], "read(out=)")
        for chunks, sel, local in self._groups(rows):
            out[sel] = _gather(self._read_chunks(chunks), local)
        return out

    def write(self, rows, values, where=None):
        """Store ``values[i]`` as row ``rows[i]`` (where the mask ``where`` is set, when given): read (unless
        ``rows`` cover it entirely), change and write back each touched chunk once."""
        self._check_usable()
        rows, values = backend.to_host(rows), backend.to_host(values)
        if where is not None:
            rows, values = rows[where], values[where]
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        cr = self.spec.chunk_rows
        for chunks, sel, local in self._groups(rows):
            full = np.bincount(local // cr, minlength=len(chunks)) == cr  # rows are distinct: all cr are written
            buf = self._read_chunks(chunks, skip=full)
            buf[local] = values[sel]
            try:
                for j, c in enumerate(chunks):
                    self.ds.id.write_direct_chunk((c * cr, 0), buf[j * cr:(j + 1) * cr])
            except (OSError, RuntimeError) as e:
                self._fail(e, f"writing {buf.nbytes:,} bytes of rows")
            self.bytes_written += buf.nbytes

    def close(self):
        """Flush and close the file, and let other runs have it; it stays on disk, readable by plain h5py. After a
        failed write the file is closed as far as HDF5 manages, and nothing is raised: that write's error was."""
        if self.file is None:
            return
        try:
            self.file.close()
        except (OSError, RuntimeError) as e:
            if self._broken is None:
                self._fail(e, "flushing its last metadata")
        finally:
            self.file = None
            _unlock(self._lock, self.path)


def _lock(path):
    """An exclusive ``flock`` on ``<path>.lock`` (the open lock file), or SsdFileError if another process holds it.

    Taken before h5py opens the data file: its mode "w" truncates the file before HDF5 takes HDF5's own lock, so
    a second run on the same file wiped the first's rows and only then failed, and the first went on to a wrong
    result. The lock is on a file beside the data rather than on the data file itself because HDF5 flocks the
    data file too, and flock refuses a second open file even in one process: ours would refuse HDF5's unless
    HDF5's locking were turned off, which the HDF5_USE_FILE_LOCKING variable overrides. The kernel drops the lock
    when the lock file is closed or collected, or the process ends however it ends, so a killed run blocks no one
    (its lock file stays, unlocked). A file system without flock gets no lock (``io/file_lock.py``).
    """
    name = path + ".lock"
    while True:
        try:
            lock = open(name, "a")
        except OSError as e:
            raise OSError(f"SsdTier: cannot create the HDF5 file {path} (its lock file: {e.strerror or e}); "
                          "pass a path in a writable folder that exists") from None
        try:
            held = file_lock.lock(lock)
        except file_lock.Busy:
            lock.close()
            raise SsdFileError(f"{path}: another run is using this file; give this run another folder "
                               "(tools/train.py --ssd-dir) or wait for that one to end") from None
        if held is None:
            lock.close()
            return None
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(lock.fileno()).st_ino == os.stat(name).st_ino:
                return lock
        lock.close()  # its holder removed the file as we opened it: lock the one there now


def _unlock(lock, path):
    """Remove the lock file, then let go of the lock: a process that opened the removed file sees that it is gone."""
    if lock is not None:
        with contextlib.suppress(OSError):
            os.unlink(path + ".lock")
        lock.close()
