"""The MPI backend: mpi4py's buffer collectives on host NumPy arrays, the CPU path for several processes.

Device arrays are copied to the host and the results back to the device, so it also serves a GPU run that has no
NCCL. Every call is non-blocking (``Ialltoallv``, ``Iallreduce``, ...) and then waited on while a watchdog thread
holds the deadline: a call still pending after ``timeout_s`` prints one line naming the op, the rank and the
timeout, and aborts every rank. Creating the communicator installs an excepthook that prints an uncaught
exception's traceback and aborts every rank too, so the others exit within a second instead of waiting in their
next collective.

How a rank waits (``settle``): MPICH's own ``Wait`` spins, so a rank waiting on a hung peer burnt a core for the
whole timeout (3.0 s of CPU in a 3 s wait, measured). ``settle`` polls ``Test``, yielding the core between polls,
for 20 ms plus the time the op's bytes take at 100 MB/s, a tenth of what 2 cores moved here; then it sleeps
between polls, from 31 us doubling up to 2 ms (0.08 s of CPU in the same 3 s wait). MPI moves data only inside a
call, so the spin is what keeps a transfer fast: with naps alone, a 32 MiB alltoallv took 2.2 s against 18 ms. On
2 cores, 2 and 3 ranks, alltoallvs of 8 B to 32 MiB took what ``Wait`` took, within the noise of a shared machine.
"""
import os
import sys
import time
import zlib

import numpy as np
from mpi4py import MPI

from gpuemb.autograd.backend import to_host

from .base import Communicator, as_bytes, like, row_bytes

_REDUCE = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
_RELAY_S = 0.5
# settle's spin: 20 ms, plus the time the op's bytes take at a tenth of the 1 GB/s measured on 2 cores
_SPIN_S, _SPIN_BYTES_PER_S, _NAP_S = 0.02, 100e6, 0.002


def _displacements(counts):
    return np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()


class MpiCommunicator(Communicator):
    """Collectives over ``comm`` (MPI.COMM_WORLD by default)."""

    name = "mpi"

    def __init__(self, timeout_s=None, comm=None):
        self._mpi = comm or MPI.COMM_WORLD
        super().__init__(self._mpi.Get_rank(), self._mpi.Get_size(), timeout_s)
        install_abort_hook(self)
        self._busy = None  # (op, deadline) while waiting
        self._start_watchdog(self._check_deadline)
        self.local_rank = self._rank_on_host()

    def _rank_on_host(self):
        """This rank's index among the ranks on its host, by an allgather of host-name hashes under the deadline
        (``Split_type`` would block without one)."""
        mine = np.array([zlib.crc32(MPI.Get_processor_name().encode())], np.int64)
        hosts = np.empty(self.world_size, np.int64)
        self._wait(self._mpi.Iallgather(mine, hosts), "init (finding the ranks on this host)")
        return int((hosts[:self.rank] == mine[0]).sum())

    def _abort_world(self):
        # mpiexec relays our stderr through a pipe that Abort's kill can cut: without the pause the one-line reason
        # went missing in 2 of 8 aborts here
        time.sleep(_RELAY_S)
        MPI.COMM_WORLD.Abort(1)

    def _wait(self, request, op, nbytes=0):
        """Wait for ``request``, which moves ``nbytes`` to and from this rank; the watchdog aborts every rank if it
        is still waiting after ``timeout_s``."""
        self._busy = (op, time.monotonic() + self.timeout_s)
        try:
            settle(request, _SPIN_S + nbytes / _SPIN_BYTES_PER_S)
        finally:
            self._busy = None

    def _check_deadline(self):
        busy = self._busy  # one read: the main thread may clear it meanwhile
        if busy is not None and time.monotonic() > busy[1]:
            self.abort(self._overdue(busy[0]))

    def _exchange(self, h, op):
        table = np.empty((self.world_size, h.size), np.int64)
        self._wait(self._mpi.Iallgather(h, table), op)
        return table

    def _alltoallv(self, send, send_counts, recv_counts):
        host = np.ascontiguousarray(to_host(send))
        out = np.empty((int(recv_counts.sum()),) + host.shape[1:], host.dtype)
        sb, rb = send_counts * row_bytes(host), recv_counts * row_bytes(host)
        request = self._mpi.Ialltoallv([as_bytes(host), (sb.tolist(), _displacements(sb)), MPI.BYTE],
                                       [as_bytes(out), (rb.tolist(), _displacements(rb)), MPI.BYTE])
        self._wait(request, "alltoallv", host.nbytes + out.nbytes)
        return like(send, out)

    def _allreduce(self, x, op):
        host = np.ascontiguousarray(to_host(x))
        out = np.empty_like(host)
        self._wait(self._mpi.Iallreduce(host, out, _REDUCE[op]), "allreduce", 2 * host.nbytes)
        return like(x, out)

    def _reduce_scatter(self, x, op):
        host = np.ascontiguousarray(to_host(x))
        out = np.empty((host.shape[0] // self.world_size,) + host.shape[1:], host.dtype)
        self._wait(self._mpi.Ireduce_scatter_block(host, out, _REDUCE[op]), "reduce_scatter", host.nbytes)
        return like(x, out)

    def _allgather(self, x, rows):
        host = np.ascontiguousarray(to_host(x))
        out = np.empty((int(rows.sum()),) + host.shape[1:], host.dtype)
        nb = rows * row_bytes(host)
        request = self._mpi.Iallgatherv([as_bytes(host), MPI.BYTE],
                                        [as_bytes(out), (nb.tolist(), _displacements(nb)), MPI.BYTE])
        self._wait(request, "allgather", out.nbytes)
        return like(x, out)

    def _broadcast(self, x, root):
        out = np.array(to_host(x), order="C") if self.rank == root else np.empty(x.shape, x.dtype)
        self._wait(self._mpi.Ibcast([as_bytes(out), MPI.BYTE], root), "broadcast", out.nbytes)
        return like(x, out)


def settle(request, spin_s, nap_s=_NAP_S):
    """Return once ``request`` is complete: ``Test`` in a loop that yields the core for ``spin_s``, then between
    naps that double from ``nap_s / 64`` up to ``nap_s``, so a rank waiting on a late peer idles."""
    end, nap = time.perf_counter() + spin_s, nap_s / 64
    while not request.Test():
        if time.perf_counter() < end:
            os.sched_yield()
        else:
            time.sleep(nap)
            nap = min(2 * nap, nap_s)


_hooked = []


def install_abort_hook(comm):
    """Make an uncaught exception on this rank print its traceback, then abort every rank (once per process)."""
    if _hooked:
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if not MPI.Is_finalized():
            comm.abort(f"uncaught {kind.__name__}: {value}")

    sys.excepthook = hook
    _hooked.append(comm)
