"""A new HDF5 file whose write errors (a full disk, a file size limit) never reach HDF5.

HDF5 does not survive a failed write: the dataset or file close that hits it fails, leaves the object half freed,
and the next close of it (h5py retries when the object is garbage-collected) crashes the process. So HDF5 writes
through :class:`_Disk`, which never fails: after the first error it keeps the bytes HDF5 writes in memory (and
reads them back to it), so HDF5 closes the file cleanly, and :class:`H5Output` then raises the error as one
``OSError`` naming the file and how much of it was written. The writer calls ``check()`` between pieces, so little
is kept after an error.
"""
import os

import h5py


class _Disk:
    """The file-like object h5py's ``fileobj`` driver writes through: ``pwrite`` to ``fd`` until an error, then
    memory."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos, self.written, self.error, self.kept = 0, 0, None, []

    def seek(self, pos, whence=os.SEEK_SET):
        ends = [os.fstat(self.fd).st_size] + [at + len(b) for at, b in self.kept]
        self.pos = pos + {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: max(ends)}[whence]
        return self.pos

    def tell(self):
        return self.pos

    def write(self, data):
        data = memoryview(data).cast("B")
        done = 0
        while self.error is None and done < len(data):
            try:
                done += os.pwrite(self.fd, data[done:], self.pos + done)
            except OSError as e:
                self.error = e
        self.written += done
        if done < len(data):
            self.kept.append((self.pos + done, bytes(data[done:])))
        self.pos += len(data)
        return len(data)

    def readinto(self, buf):
        buf = memoryview(buf).cast("B")
        n = os.preadv(self.fd, [buf], self.pos)
        buf[n:] = bytes(len(buf) - n)
        for at, b in self.kept:  # what could not be written, in the order it was
            lo, hi = max(at, self.pos), min(at + len(b), self.pos + len(buf))
            if lo < hi:
                buf[lo - self.pos:hi - self.pos] = b[lo - at:hi - at]
                n = max(n, hi - self.pos)
        self.pos += n
        return n

    def read(self, size=-1):
        buf = bytearray(max(size, 0))
        return bytes(buf[:self.readinto(buf)])

    def truncate(self, size=None):
        if self.error is None:
            try:
                os.ftruncate(self.fd, self.pos if size is None else size)
            except OSError as e:
                self.error = e
        return size

    def flush(self):
        pass


class H5Output:
    """``with H5Output(path, shown) as out:`` writes the new HDF5 file ``out.file`` at ``path``; a write that
    failed raises ``OSError`` (its errno) from ``out.check()`` and on leaving the block, once the file is closed.
    ``shown``: the name the error gives the file (the target of a temp file); ``options``: more of
    ``h5py.File``'s (a snapshot's ``userblock_size`` and ``libver``)."""

    def __init__(self, path, shown=None, **options):
        self.path, self.shown = os.fspath(path), os.fspath(shown or path)
        self.disk = _Disk(self.path)
        try:
            self.file = h5py.File(self.disk, "w", **options)
        except BaseException:
            os.close(self.disk.fd)
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(check=exc[0] is None)

    def close(self, check=True):
        """Close the file (HDF5's last writes go out here), then raise a write error if ``check`` and there was
        one."""
        if self.disk.fd is None:
            return
        try:
            self.file.close()
        finally:
            os.close(self.disk.fd)
            self.disk.fd = None
        if check:
            self.check()

    def check(self):
        """Raise the first write error, if there was one."""
        e = self.disk.error
        if e is not None:
            raise OSError(e.errno, f"{self.shown}: {e.strerror} after {self.disk.written:,} bytes of it were "
                                   "written")
