"""The NCCL backend: ``cupy.cuda.nccl`` between GPUs, with a host communicator for control.

- Bootstrap: rank 0 makes the NCCL unique id; the control communicator (MPI, or local for a single rank)
  broadcasts it; each rank first picks GPU ``local_rank % device count`` so ranks on one host use distinct GPUs.
- Headers (the checks, alltoallv's receive counts) travel over the control communicator on the host, so they
  need no device-to-host copy and fall under its deadline.
- NCCL has no all-to-all: alltoallv is ``groupStart()``, a ``send`` and a ``recv`` per peer (itself included),
  ``groupEnd()``. Everything is enqueued on CuPy's current stream and returns at once.
- Deadline: after each call an event is recorded; a watchdog thread checks (every tenth of the timeout, at most
  every second) that the oldest unfinished one is younger than ``timeout_s`` and that NCCL reports no
  asynchronous error; otherwise it prints one line and aborts every rank.

CuPy and its NCCL binding come from the backend (``backend.xp``, ``backend.library("nccl")``), as every device
library does. Where NCCL cannot be used (CuPy found no libnccl, or the binding does not import), creating the
communicator is a ``CommError`` saying so and what to do.
"""
import collections
import time

import numpy as np

from gpuemb.autograd import backend

from .base import CommError, Communicator, as_bytes, like, row_bytes

_UID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


def nccl_library():
    """CuPy's NCCL binding, or a ``CommError`` saying why it cannot be used and what to do."""
    try:
        nccl = backend.library("nccl")
    except ImportError as e:
        raise CommError(f"backend='nccl': CuPy's NCCL binding does not import ({e}); install the gpu or gpu-cu13 "
                        f"extra, or use backend='mpi'") from None
    if not getattr(nccl, "available", False):  # CuPy's binding imports without libnccl, then lacks its functions
        raise CommError("backend='nccl': CuPy found no libnccl; install the gpu or gpu-cu13 extra, which brings "
                        "NCCL, or use backend='mpi'")
    return nccl


class NcclCommunicator(Communicator):
    """Collectives among the GPUs of the ranks of ``control`` (an MpiCommunicator, or a LocalCommunicator)."""

    name = "nccl"

    def __init__(self, control, timeout_s=None):
        cupy, nccl = backend.xp, nccl_library()
        super().__init__(control.rank, control.world_size, timeout_s, control.local_rank)
        self._cupy, self._nccl_mod, self._control = cupy, nccl, control
        self.device_id = control.local_rank % cupy.cuda.runtime.getDeviceCount()
        cupy.cuda.Device(self.device_id).use()
        self._dtypes = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64,
                        np.dtype(np.int32): nccl.NCCL_INT32, np.dtype(np.int64): nccl.NCCL_INT64}
        self._ops = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}
        self._comm = nccl.NcclCommunicator(self.world_size, self._unique_id(), self.rank)
        self._pending = collections.deque()  # (event, op, deadline), oldest first
        self._start_watchdog(self._check_deadline)

    def _unique_id(self):
        """Rank 0's NCCL id on every rank, in the type this CuPy's ``get_unique_id`` returns (tuple or bytes)."""
        msg = np.zeros(_UID_BYTES + 1, np.int64)
        if self.rank == 0:
            uid = self._nccl_mod.get_unique_id()
            msg[:_UID_BYTES], msg[-1] = list(uid), isinstance(uid, bytes)
        msg = self._control.broadcast(msg, root=0, tag="nccl_bootstrap")
        values = msg[:_UID_BYTES].tolist()
        return bytes(values) if msg[-1] else tuple(values)

    def close(self):
        super().close()
        for event, _, _ in self._pending:  # NCCL must not be destroyed under calls still running
            event.synchronize()
        self._comm.destroy()

    def _abort_world(self):
        self._comm.abort()
        self._control._abort_world()

    # -- the deadline ---------------------------------------------------------------------------------------------
    def _enqueued(self, op):
        """Start the deadline of the NCCL call just enqueued on the current stream."""
        event = self._cupy.cuda.Event(disable_timing=True)
        event.record()
        self._pending.append((event, op, time.monotonic() + self.timeout_s))

    def _check_deadline(self):
        with self._cupy.cuda.Device(self.device_id):  # events and NCCL queries run on this thread, on our GPU
            while self._pending and self._pending[0][0].done:
                self._pending.popleft()
            if self._pending and time.monotonic() > self._pending[0][2]:
                self.abort(self._overdue(self._pending[0][1]) + " (on the GPU)")
            try:
                self._comm.check_async_error()
            except Exception as e:  # NcclError: a peer died or the network failed
                self.abort(f"NCCL reported an asynchronous error: {e}")

    # -- the collectives ------------------------------------------------------------------------------------------
    def _exchange(self, h, op):
        return self._control._exchange(h, op)

    def _stream(self):
        return self._cupy.cuda.get_current_stream().ptr

    def _device(self, x):
        return self._cupy.ascontiguousarray(backend.to_device(x))

    def _grouped(self, sends, recvs):
        """Enqueue ``send``s of ``(uint8 array, peer)`` and ``recv``s into ``(uint8 array, peer)`` as one group."""
        nccl, stream = self._nccl_mod, self._stream()
        nccl.groupStart()
        try:
            for buf, peer in sends:
                if buf.size:
                    self._comm.send(buf.data.ptr, buf.size, nccl.NCCL_UINT8, peer, stream)
            for buf, peer in recvs:
                if buf.size:
                    self._comm.recv(buf.data.ptr, buf.size, nccl.NCCL_UINT8, peer, stream)
        finally:
            nccl.groupEnd()

    def _alltoallv(self, send, send_counts, recv_counts):
        d = self._device(send)
        out = self._cupy.empty((int(recv_counts.sum()),) + d.shape[1:], d.dtype)
        rb = row_bytes(d)
        self._grouped(_split(as_bytes(d), send_counts * rb), _split(as_bytes(out), recv_counts * rb))
        self._enqueued("alltoallv")
        return like(send, out)

    def _allreduce(self, x, op):
        d = self._device(x)
        out = self._cupy.empty_like(d)
        self._comm.allReduce(d.data.ptr, out.data.ptr, d.size, self._dtypes[d.dtype], self._ops[op],
                             self._stream())
        self._enqueued("allreduce")
        return like(x, out)

    def _reduce_scatter(self, x, op):
        d = self._device(x)
        out = self._cupy.empty((d.shape[0] // self.world_size,) + d.shape[1:], d.dtype)
        self._comm.reduceScatter(d.data.ptr, out.data.ptr, out.size, self._dtypes[d.dtype], self._ops[op],
                                 self._stream())
        self._enqueued("reduce_scatter")
        return like(x, out)

    def _allgather(self, x, rows):
        d = self._device(x)
        out = self._cupy.empty((int(rows.sum()),) + d.shape[1:], d.dtype)
        if (rows == rows[0]).all():
            self._comm.allGather(d.data.ptr, out.data.ptr, d.nbytes, self._nccl_mod.NCCL_UINT8,
                                 self._stream())
        else:  # NCCL's allgather wants equal parts; uneven ones go as a send to every peer
            mine = as_bytes(d)
            self._grouped([(mine, p) for p in range(self.world_size)], _split(as_bytes(out), rows * row_bytes(d)))
        self._enqueued("allgather")
        return like(x, out)

    def _broadcast(self, x, root):
        d = self._device(x)
        out = d.copy() if self.rank == root else self._cupy.empty_like(d)
        self._comm.broadcast(out.data.ptr, out.data.ptr, out.nbytes, self._nccl_mod.NCCL_UINT8, root,
                             self._stream())
        self._enqueued("broadcast")
        return like(x, out)


def _split(flat, nbytes):
    """``[(part, peer), ...]``: consecutive parts of the uint8 array ``flat`` of ``nbytes[peer]`` bytes each."""
    ends = np.cumsum(nbytes).tolist()
    return [(flat[end - n:end], peer) for peer, (n, end) in enumerate(zip(nbytes.tolist(), ends))]
