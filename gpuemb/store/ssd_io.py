"""Positioned chunk I/O for the SSD tier: many reads or writes in flight at once, and a write-back buffer.

A disk answers random reads several times faster with many in flight than one after another: fio measured 20.5k
16 KB reads a second at queue depth 1 and 97k at depth 16 on the development machine (docs/perf/README.md). So
``ChunkIO`` keeps up to ``threads`` requests in flight from a pool of threads: ``os.preadv``/``os.pwritev``
release the GIL for the system call. Chunks that lie next to each other in the file become one call, scattering
into (or gathering from) several buffers.

``WriteBack`` holds the newest bytes of chunks written but not yet on the disk, and writes them in the background:
a write returns once its chunks are in memory, and the disk catches up while the step computes. A read takes a
chunk from it first (``get``), so a row reads back what was last written. A chunk is never in two writes at once:
one written again while its write is in flight waits for it, so the disk never ends with the older bytes.
"""
import errno
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import numpy as np

_RUN_BYTES = 1 << 20  # one call moves at most this much, so a long run of adjacent chunks spreads over the threads
_IOV_MAX = 512  # buffers in one call: under the system's IOV_MAX (1024 on Linux)


def _move(call, fd, offset, buffers):
    """Move ``buffers`` (uint8 arrays) from or to ``offset`` onwards, resuming after a partial transfer."""
    views = [memoryview(b) for b in buffers]
    while views:
        n = call(fd, views, offset)
        if n == 0:  # reading past the end: the file is shorter than the rows it should hold
            raise OSError(errno.EIO, f"the file ends before byte {offset}, inside its rows; another program cut it")
        offset += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def _drain(call, fd, jobs):
    """Make the calls of the shared deque ``jobs`` until it is empty: a thread whose calls return early takes more,
    so a slow read holds up its own thread only, not a fixed share of the batch behind it."""
    while True:
        try:
            offset, buffers = jobs.popleft()  # atomic: the threads share the deque without a lock
        except IndexError:
            return
        _move(call, fd, offset, buffers)


class ChunkIO:
    """Reads and writes of whole chunks of ``chunk_bytes`` at file offsets of ``fd``, from ``threads`` threads."""

    def __init__(self, fd, chunk_bytes, threads, name):
        self.fd, self.chunk_bytes, self.threads = fd, chunk_bytes, threads
        self.pool = ThreadPoolExecutor(threads, name)
        self._nowait = hasattr(os, "RWF_NOWAIT")
        self._cached, self._calls = 1.0, 0  # the share of chunks the page cache held lately; reads so far

    def _jobs(self, offsets, buffers):
        """``(offset, buffers)`` calls, one per run of chunks adjacent in the file, split at ``_RUN_BYTES``."""
        order = np.argsort(offsets, kind="stable")
        offs = offsets[order]
        per = max(1, min(_IOV_MAX, _RUN_BYTES // self.chunk_bytes))
        breaks = (np.flatnonzero(np.diff(offs) != self.chunk_bytes) + 1).tolist()
        jobs = []
        for a, b in zip([0] + breaks, breaks + [offs.size]):
            for c in range(a, b, per):
                jobs.append((int(offs[c]), [buffers[i] for i in order[c:min(c + per, b)].tolist()]))
        return jobs

    def submit(self, write, offsets, buffers):
        """Start moving ``buffers[i]`` from (``write``: to) ``offsets[i]``; returns the futures of the calls."""
        jobs = deque(self._jobs(np.asarray(offsets, np.int64), buffers))
        call = os.pwritev if write else os.preadv
        return [self.pool.submit(_drain, call, self.fd, jobs) for _ in range(min(self.threads, len(jobs)))]

    def read(self, offsets, buffers):
        """Fill ``buffers`` from ``offsets``; returns the seconds it waited.

        Chunks in the kernel's page cache are read first, in this thread, with ``RWF_NOWAIT`` (which refuses
        rather than wait for the disk): for them a thread pool only adds its hand-offs (a chunk from the page cache
        took 3 us at queue depth 1 and 111 us at 16 in threads). The rest go to the pool. While most chunks miss
        the cache (a file far larger than the RAM) the first pass is skipped, tried again every 16th call."""
        start = time.perf_counter()
        offsets = np.asarray(offsets, np.int64)
        if self._nowait and (self._cached > 0.25 or self._calls % 16 == 0):
            offsets, buffers = self._read_cached(offsets, buffers)
        self._calls += 1
        if offsets.size:
            for f in self.submit(False, offsets, buffers):
                f.result()
        return time.perf_counter() - start

    def _read_cached(self, offsets, buffers):
        """Read what the page cache holds; returns the offsets and buffers still to read, and keeps the share
        that was cached (``_cached``, a running average)."""
        left = []
        for i, (offset, buffer) in enumerate(zip(offsets.tolist(), buffers)):
            try:
                if os.preadv(self.fd, [buffer], offset, os.RWF_NOWAIT) == len(buffer):
                    continue
            except BlockingIOError:
                pass
            except OSError:  # a file system without RWF_NOWAIT: the pool reads everything from now on
                self._nowait = False
                return offsets[i:], buffers[i:]
            left.append(i)
        self._cached = 0.5 * self._cached + 0.5 * (1 - len(left) / max(offsets.size, 1))
        return offsets[left], [buffers[i] for i in left]

    def close(self):
        self.pool.shutdown(wait=True)


class WriteBack:
    """Chunks written and not yet on the disk, at most about ``limit`` bytes of them; ``io`` writes them."""

    def __init__(self, io, limit):
        self.io, self.limit = io, limit
        self.waiting = {}  # chunk -> (offset, bytes) not yet handed to the disk
        self.flying = {}   # chunk -> bytes being written
        self.flights = []  # (futures, chunks) of the writes in flight, oldest first
        self.seconds = 0.0  # time callers waited for the disk
        self.chunks = 0     # chunks handed to the disk

    def __len__(self):
        return len(self.waiting) + len(self.flying)

    def get(self, chunk):
        """The newest bytes of ``chunk`` when they have not surely reached the disk, else None."""
        got = self.waiting.get(chunk)
        return got[1] if got is not None else self.flying.get(chunk)

    def put(self, chunks, offsets, buffers):
        """Take the newest bytes of ``chunks`` and start writing those not in a write already."""
        for c, o, b in zip(chunks, offsets, buffers):
            self.waiting[c] = (o, b)
        self._launch()

    def over(self):
        """Whether it holds more than ``limit`` bytes with writes in flight: the writer should wait for one."""
        return len(self) * self.io.chunk_bytes > self.limit and bool(self.flights)

    def _launch(self):
        ready = [c for c in self.waiting if c not in self.flying]
        if not ready:
            return
        offsets = [self.waiting[c][0] for c in ready]
        buffers = [self.waiting.pop(c)[1] for c in ready]
        self.flying.update(zip(ready, buffers))
        self.flights.append((self.io.submit(True, offsets, buffers), ready))
        self.chunks += len(ready)

    def reap(self, wait=0):
        """Retire the writes that are done, after waiting for the oldest ``wait`` of them (all for ``wait=None``);
        raise the first error among them; start writing the chunks that wait."""
        if wait != 0:
            start = time.perf_counter()
            for futures, _ in self.flights[:wait]:
                futures_wait(futures)
            self.seconds += time.perf_counter() - start
        flying = []
        for futures, chunks in self.flights:
            if not all(f.done() for f in futures):
                flying.append((futures, chunks))
                continue
            for c in chunks:
                del self.flying[c]
            for f in futures:
                if f.exception() is not None:
                    self.flights = flying
                    raise f.exception()
        self.flights = flying
        self._launch()

