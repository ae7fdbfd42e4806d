"""The SSD tier: rows in an HDF5 file, moved a chunk at a time by positioned I/O with many requests in flight.

The file holds one contiguous dataset per slab, ``slabs/000000``, ``slabs/000001``, ..., of ``slab_rows`` records
``(row [width] of dtype, step int32)``: a row and its update count side by side, so the level above keeps no
array of steps in memory (docs/store.md, "Bytes a key"), and one read brings both. Closing adds the virtual dataset
``rows [capacity]`` over the slabs, so plain h5py reads the table as one array (``f["rows"]["row"]``).

Each slab is allocated in the file when it is added, zero-filled, so its byte offset is fixed from then on and rows
never written read as zeros. So the data path needs no HDF5 call: chunks of ``chunk_rows`` records are read and
written at their offsets with ``os.preadv``/``os.pwritev`` from a pool of threads (``ssd_io.py``), up to
``threads`` requests in flight, and HDF5's own lock never serializes them. (Through h5py, fancy indexing was
about 30 times slower than a chunk's bytes, and h5py holds one lock around every call.)

A read gathers its rows from whole chunks; a write reads each chunk it covers in part, changes its rows, and hands
the chunks to the write-back buffer, which writes them in the background: the disk catches up while the step
computes. ``sync()`` (called by the home level's ``flush``, so before any snapshot is renamed into place) waits
for every write and raises the error of any that failed.

While open, the tier holds a lock on ``<path>.lock`` that keeps other processes off the file (``_lock``). A write
the disk refuses raises SsdFileError, and so does every later call.
"""
import contextlib
import os
import re
import threading

import h5py
import numpy as np

from gpuemb.autograd import backend
from gpuemb.io import file_lock

from .errors import SsdFileError
from .ssd_io import ChunkIO, WriteBack
from .tiers import Tier, _gather

FORMAT, VERSION = "gpuemb-ssd-tier", 2
THREADS = 16  # requests in flight: the disk of the development machine peaks at queue depth 16 (ssd_io.py)
WRITE_BACK_BYTES = 128 << 20  # chunks written and not yet on the disk; a write waits while more are held
_GROUP_BYTES = 64 << 20  # a call gathers from at most this many bytes of chunks at a time


def _word(nbytes):
    """The widest unsigned integer type whose size divides ``nbytes``: records move as rows of these."""
    return next(np.dtype(f"u{k}") for k in (8, 4, 2, 1) if nbytes % k == 0)


class SsdTier(Tier):
    """Rows (and each row's step) in the HDF5 file at ``path``, created afresh; see the module docstring."""
    stores_steps = True

    def __init__(self, path, spec, threads=THREADS, write_back_bytes=WRITE_BACK_BYTES):
        super().__init__(spec, f"SsdTier({os.fspath(path)})")
        self.path = os.fspath(path)
        self.record = np.dtype([("row", self.dtype, (self.width,)), ("step", np.int32)])
        self.chunk_bytes = spec.chunk_rows * self.record.itemsize
        self._lock = _lock(self.path)  # before h5py touches the file
        self._broken = None  # the error of a failed write: later calls raise it again and touch no h5py handle
        try:
            self.file = h5py.File(self.path, "w")
            self._fd = os.open(self.path, os.O_RDWR)
        except OSError as e:
            _unlock(self._lock, self.path)
            raise OSError(f"SsdTier: cannot create the HDF5 file {self.path} ({e}); "
                          "pass a path in a writable folder that exists") from None
        a = self.file.attrs
        a["format"], a["version"], a["slab_rows"], a["chunk_rows"] = FORMAT, VERSION, spec.slab_rows, spec.chunk_rows
        self.slabs = self.file.create_group("slabs")
        self._offsets = np.zeros(0, np.int64)  # each slab's byte offset in the file
        self._io = ChunkIO(self._fd, self.chunk_bytes, threads, "gpuemb-ssd")
        self._back = WriteBack(self._io, write_back_bytes)
        self._mutex = threading.Lock()  # a prefetch thread and the step's thread may both call
        self.chunks_read, self._read_seconds = 0, 0.0
        self._ahead, self._written = {}, None  # chunks read ahead (``read_ahead``); chunks written while it reads

    @property
    def capacity(self):
        return self._offsets.size * self.slab_rows

    @property
    def nbytes(self):
        return self.capacity * self.record.itemsize

    @property
    def chunks_written(self):
        return self._back.chunks

    @property
    def io_seconds(self):
        """Seconds callers waited for the disk: reads, and writes past the write-back buffer's bound."""
        return self._read_seconds + self._back.seconds

    @property
    def pending_writes(self):
        """Chunks written and not yet surely on the disk."""
        return len(self._back)

    def add_slab(self):
        """Add ``slab_rows`` zeroed rows: a dataset allocated and zero-filled in the file now."""
        with self._mutex:
            self._check_usable()
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.CONTIGUOUS)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_ALLOC)
            dcpl.set_fill_value(np.zeros(1, self.record))
            try:
                ds = self.slabs.create_dataset(f"{self._offsets.size:06d}", (self.slab_rows,), self.record, dcpl=dcpl)
                offset = ds.id.get_offset()
                self.file.flush()  # the zeros are in the file before any positioned write lands beside them
            except (OSError, RuntimeError, ValueError) as e:  # h5py raises ValueError for some failed writes
                self._fail(e, f"writing {self.slab_rows * self.record.itemsize:,} bytes (a slab of rows)")
            self._offsets = np.append(self._offsets, np.int64(offset))

    def _check_usable(self):
        if self._broken is not None:
            raise self._broken

    def _fail(self, e, what):
        """Raise a one-line SsdFileError for the failed write ``e`` (h5py's message spans lines, and closing the file
        raises a second one), and refuse every later call: HDF5 may hold half-written state."""
        found = re.search(r"errno = (\d+), error message = '([^']*)'", str(e))
        reason = (f"{found[2]}, errno {found[1]}" if found else
                  f"{e.strerror}, errno {e.errno}" if getattr(e, "strerror", None) else str(e).splitlines()[0])
        self._broken = SsdFileError(f"{self.path}: {what} failed ({reason}); free space on that disk, or put the "
                                    "tables' files on a larger one (tools/train.py --ssd-dir)")
        raise self._broken from None

    def _reap(self, wait=0):
        """Retire finished background writes; a failed one breaks the tier here."""
        try:
            self._back.reap(wait)
        except OSError as e:
            self._fail(e, "writing rows back in the background")

    def _chunk_offsets(self, chunks):
        per = self.slab_rows // self.spec.chunk_rows
        return self._offsets[chunks // per] + (chunks % per) * self.chunk_bytes

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
            yield touched[g0:g0 + per], sel, (inv[sel] - g0) * cr + rows[sel] % cr

    def _load(self, chunks, skip=None):
        """The bytes of ``chunks`` (uint8 ``[n, chunk_bytes]``): the write-back buffer's or the read-ahead's where
        they hold them, else read from the disk, many at once; chunk j is left unset where ``skip[j]``."""
        buf = np.empty((chunks.size, self.chunk_bytes), np.uint8)
        want = np.ones(chunks.size, np.bool_) if skip is None else ~skip
        if len(self._back) or self._ahead:
            for j in np.flatnonzero(want).tolist():
                c = int(chunks[j])
                held = self._back.get(c)
                held = self._ahead.get(c) if held is None else held
                if held is not None:
                    buf[j], want[j] = held, False
        at = np.flatnonzero(want)
        if at.size:
            try:
                self._read_seconds += self._io.read(self._chunk_offsets(chunks[at]), [buf[j] for j in at.tolist()])
            except OSError as e:
                self._fail(e, f"reading {at.size * self.chunk_bytes:,} bytes of rows")
            self.chunks_read += at.size
            self.bytes_read += at.size * self.chunk_bytes
        return buf

    def read_ahead(self, rows):
        """Read the chunks of ``rows`` into memory for a coming ``read``, without holding the tier while the disk
        works: a training loop calls it from its prefetch thread while the step updates rows. Chunks written in
        the meantime are dropped, not kept stale, and what was read ahead before is forgotten (one batch's worth
        is held at most)."""
        rows = np.unique(backend.to_host(rows) // self.spec.chunk_rows)
        with self._mutex:
            self._check_usable()
            self._ahead, self._written = {}, set()
            chunks = np.array([c for c in rows.tolist() if self._back.get(c) is None], np.int64)
        if not chunks.size:
            return
        buf = np.empty((chunks.size, self.chunk_bytes), np.uint8)
        try:
            seconds = self._io.read(self._chunk_offsets(chunks), list(buf))
        except OSError:
            return  # a hint only: the read that needs these chunks meets the error itself
        with self._mutex:
            self._ahead = {c: b for c, b in zip(chunks.tolist(), buf) if c not in self._written}
            self._written = None
            self._read_seconds += seconds
            self.chunks_read += chunks.size
            self.bytes_read += buf.nbytes

    def read(self, rows, out=None, with_steps=False):
        """Rows ``[n, width]`` as NumPy, into ``out`` when given; with ``with_steps``, ``(rows, steps [n])``."""
        rows = backend.to_host(rows)
        self._check_rows(rows, "read")
        if out is None:
            out = np.empty((rows.shape[0], self.width), self.dtype)
        self._check_values(out, rows.shape[0], "read(out=)")
        steps = np.empty(rows.shape[0], np.int32)
        rb = self.spec.row_bytes
        with self._mutex:
            self._check_usable()
            self._reap()
            for chunks, sel, local in self._groups(rows):
                records = self._load(chunks).view(_word(self.record.itemsize)).reshape(-1, self._words)
                got = _gather(records, local).view(np.uint8)
                out[sel] = got[:, :rb].view(self.dtype)
                steps[sel] = got[:, rb:].view(np.int32)[:, 0]
        return (out, steps) if with_steps else out

    @property
    def _words(self):
        return self.record.itemsize // _word(self.record.itemsize).itemsize

    def write(self, rows, values, where=None, steps=None):
        """Store ``values[i]`` as row ``rows[i]``, with its step ``steps[i]`` (0 when not given), where the mask
        ``where`` is set when given: each touched chunk is read unless ``rows`` cover it entirely, changed, and
        handed to the write-back buffer (which waits while it holds more than its bound)."""
        rows, values = backend.to_host(rows), backend.to_host(values)
        steps = np.zeros(rows.shape[0], np.int32) if steps is None else backend.to_host(steps).astype(np.int32)
        if where is not None:
            where = backend.to_host(where)
            rows, values, steps = rows[where], values[where], steps[where]
        self._check_rows(rows, "write")
        self._check_values(values, rows.shape[0], "write")
        if steps.shape != rows.shape:
            raise ValueError(f"{self.name}.write: want one step per row, {rows.shape[0]}, got {steps.shape}")
        cr, rb = self.spec.chunk_rows, self.spec.row_bytes
        with self._mutex:
            self._check_usable()
            for chunks, sel, local in self._groups(rows):
                full = np.bincount(local // cr, minlength=chunks.size) == cr  # rows are distinct: all cr written
                buf = self._load(chunks, skip=full)
                records = buf.reshape(-1, self.record.itemsize)
                records[local, :rb] = np.ascontiguousarray(values[sel]).view(np.uint8).reshape(-1, rb)
                records[local, rb:] = steps[sel].view(np.uint8).reshape(-1, 4)
                ids = chunks.tolist()
                self._back.put(ids, self._chunk_offsets(chunks).tolist(), list(buf))
                self._renew_ahead(ids, buf)
                self._reap()
                while self._back.over():
                    self._reap(wait=1)
                self.bytes_written += buf.nbytes

    def _renew_ahead(self, chunks, buf):
        """Keep the new bytes ``buf`` of ``chunks``, just written, where their old ones were read ahead (they stay
        current once the write lands), and tell a read-ahead in flight not to keep what it reads of them."""
        for c, b in zip(chunks, buf):
            if c in self._ahead:
                self._ahead[c] = b
        if self._written is not None:
            self._written.update(chunks)

    def sync(self):
        """Wait until every write is on the disk (in the kernel's page cache: the file is this run's scratch, a
        snapshot is the durable copy), raising SsdFileError if one failed."""
        with self._mutex:
            self._check_usable()
            while len(self._back):
                self._reap(wait=None)

    def close(self):
        """Finish the writes, add the ``rows`` view, close the file, and let other runs have it; it stays on disk,
        readable by plain h5py. After a failed write the file is closed as far as HDF5 manages, and nothing is
        raised: that write's error was."""
        if self.file is None:
            return
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(self._release)
            if self._broken is None:
                self.sync()
                try:
                    self._add_view()
                    self.file.close()
                except (OSError, RuntimeError) as e:
                    self._fail(e, "flushing its last metadata")

    def _release(self):
        with contextlib.suppress(OSError, RuntimeError):
            self.file.close()
        self.file = None
        self._io.close()
        os.close(self._fd)
        _unlock(self._lock, self.path)

    def _add_view(self):
        """The virtual dataset ``rows [capacity]`` over the slabs, in order."""
        layout = h5py.VirtualLayout((self.capacity,), self.record)
        for s in range(self._offsets.size):
            layout[s * self.slab_rows:(s + 1) * self.slab_rows] = h5py.VirtualSource(
                ".", f"slabs/{s:06d}", shape=(self.slab_rows,))
        self.file.create_virtual_dataset("rows", layout)


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
