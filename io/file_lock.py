"""One writer at a time: exclusive ``flock`` locks between processes, which the kernel drops when the holder ends,
however it ends, so a killed run blocks no one.

A file system without ``flock`` (some network mounts) gets no lock, as HDF5's "best effort" locking does: the
caller goes on unlocked rather than refusing to run there.
"""
import errno
import fcntl
import os

UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


class Busy(Exception):
    """Another process holds the lock."""


def lock(fd):
    """Lock the open file ``fd`` (a descriptor or a file object) exclusively, without waiting: True once held,
    None where the file system has no locks; Busy where another process (or another open of it) holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in UNSUPPORTED:
            return None
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise Busy() from None
        raise
    return True


class DirLock:
    """An exclusive lock on ``directory`` (made if missing) until ``release()``; raises Busy if held elsewhere.
    ``DirLock(None)`` holds nothing."""

    def __init__(self, directory=None):
        self.fd = None
        if directory is None:
            return
        os.makedirs(directory, exist_ok=True)
        self.fd = os.open(directory, os.O_RDONLY)
        try:
            lock(self.fd)
        except BaseException:
            self.release()
            raise

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
