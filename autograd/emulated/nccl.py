"""``cupy.cuda.nccl`` of the emulated device: CuPy's NCCL binding, run over MPI between processes.

The subset the project calls, with CuPy's names, signatures and constants (``cupy_backends/cuda/libs/nccl.pyx`` and
``nccl.pxd``): ``get_unique_id`` (bytes, as in CuPy 14), ``NcclCommunicator(ndev, commId, rank)`` with
``allReduce``, ``reduceScatter``, ``allGather``, ``broadcast``, ``send``, ``recv``, ``check_async_error``, ``destroy``
and ``abort``,
and ``groupStart``/``groupEnd``. Buffers are device pointers, as NCCL's are: an emulated array's ``data.ptr`` is the
address of its NumPy memory, read and written here through ctypes. A call runs at once; its stream is not used.

Ranks are processes talking over a duplicate of MPI's COMM_WORLD, whose size and rank must be ``ndev`` and
``rank``; a world of one needs no MPI. What NCCL does, this does:
- reductions combine every rank's contribution in rank order, so every rank gets the same bits; max and min
  ignore NaN (``fmaxf``), avg pre-multiplies floats by 1/n and divides integer sums, truncating;
- allGather concatenates in rank order, broadcast copies the root's buffer;
- reduceScatter gives rank r block r (``recvcount`` elements) of the reduction;
- in place where NCCL allows it: allReduce and broadcast with ``sendbuf == recvbuf``, allGather with
  ``sendbuf == recvbuf + rank * bytes``, reduceScatter with ``recvbuf == sendbuf + rank * bytes``. Other overlaps,
  which NCCL turns into garbage silently, are refused;
- a send or recv outside a group is a group of one. A group's sends and recvs start together at the outermost
  ``groupEnd`` as non-blocking MPI calls, so a group that sends to and receives from every peer cannot deadlock.
  Sends to a peer match its recvs in order; a size mismatch, which NCCL hangs on or corrupts, is an error here.
A collective inside a group is refused: the project calls none there.
"""
import ctypes
import operator
import os
import threading

import numpy as np

available = True

NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = range(5)
NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9

# NumPy has no bfloat16: it travels as its bytes and cannot be reduced here
_DTYPES = dict(enumerate(map(np.dtype, ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
                                        "float64", "uint16"))))
_REDUCE = {NCCL_SUM: np.add, NCCL_PROD: np.multiply, NCCL_MAX: np.fmax, NCCL_MIN: np.fmin}
_UID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
_SYSTEM_ERROR, _INVALID_ARGUMENT, _INVALID_USAGE = 2, 4, 5
_ERRORS = {_SYSTEM_ERROR: "NCCL_ERROR_SYSTEM_ERROR", _INVALID_ARGUMENT: "NCCL_ERROR_INVALID_ARGUMENT",
           _INVALID_USAGE: "NCCL_ERROR_INVALID_USAGE"}


class NcclError(RuntimeError):
    """A failed NCCL call, as CuPy raises it: ``status`` is NCCL's result code, the message starts with its name."""

    def __init__(self, status, detail):
        self.status = status
        super().__init__(f"{_ERRORS[status]}: {detail}")


def get_unique_id():
    """A fresh id naming one communicator; every rank must pass rank 0's to ``NcclCommunicator``."""
    return os.urandom(_UID_BYTES)


# -- groups: per thread, as NCCL's group depth is -------------------------------------------------------------------
_group = threading.local()


def groupStart():
    if getattr(_group, "depth", 0) == 0:
        _group.calls = []  # (communicator, "send" or "recv", uint8 view of the buffer, peer)
    _group.depth = getattr(_group, "depth", 0) + 1


def groupEnd():
    """End a group; the outermost one runs its sends and recvs."""
    if getattr(_group, "depth", 0) == 0:
        raise NcclError(_INVALID_USAGE, "groupEnd without a groupStart; pair each groupEnd with a groupStart")
    _group.depth -= 1
    if _group.depth == 0:
        calls, _group.calls = _group.calls, []
        comms = {id(c[0]): c[0] for c in calls}.values()
        pending = [p for comm in comms for p in comm._start([c[1:] for c in calls if c[0] is comm])]
        _finish(pending)


def _finish(pending):
    """Wait for the ``(request, buffer, peer, communicator)`` of a group; every recv must get its exact size."""
    if not pending:  # a world of one, or only oneself: no MPI
        return
    from mpi4py import MPI
    statuses = [MPI.Status() for _ in pending]
    try:
        MPI.Request.Waitall([p[0] for p in pending], statuses)
    except MPI.Exception as e:
        raise NcclError(_INVALID_USAGE, f"a recv got more bytes than it was posted for ({e}); a send and its recv "
                                        f"must have the same count and datatype") from None
    for (_, buf, peer, comm), status in zip(pending, statuses):
        if buf is not None and status.Get_count(MPI.BYTE) != buf.size:
            raise NcclError(_INVALID_USAGE, f"rank {comm._rank}: recv of {buf.size} bytes from rank {peer} got "
                                            f"{status.Get_count(MPI.BYTE)}; a send and its recv must have the same "
                                            f"count and datatype")


# -- memory behind device pointers --------------------------------------------------------------------------------
def _memory(ptr, nbytes, where):
    """A writable uint8 view of ``nbytes`` at device pointer ``ptr``."""
    if not nbytes:
        return np.empty(0, np.uint8)
    if not ptr:
        raise NcclError(_INVALID_ARGUMENT, f"{where}: a null pointer for {nbytes} bytes; pass array.data.ptr")
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(nbytes,))


def _overlap(a, a_bytes, b, b_bytes):
    return a_bytes and b_bytes and a < b + b_bytes and b < a + a_bytes


def _int(value, name, where):
    """An int argument, as CuPy's Cython signature takes it (``intptr_t``, ``size_t``, ``int``)."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: {name} must be an int (a pointer is array.data.ptr, a stream stream.ptr), got "
                        f"{type(value).__name__}") from None
    if name == "count" and value < 0:
        raise OverflowError(f"{where}: count={value}; pass a number of elements >= 0")
    return value


class NcclCommunicator:
    """One rank's communicator among ``ndev`` ranks, one per process. ``commId``: rank 0's ``get_unique_id()``."""

    def __init__(self, ndev, commId, rank):
        ndev, rank = _int(ndev, "ndev", "NcclCommunicator"), _int(rank, "rank", "NcclCommunicator")
        if not isinstance(commId, bytes):
            raise TypeError(f"NcclCommunicator: commId must be the bytes of get_unique_id(), got "
                            f"{type(commId).__name__}")
        if len(commId) != _UID_BYTES:
            raise ValueError(f"commId length {len(commId)} != {_UID_BYTES}.")  # CuPy's words
        if not 0 <= rank < ndev:
            raise NcclError(_INVALID_ARGUMENT, f"NcclCommunicator: rank={rank} of ndev={ndev}; pass a rank in "
                                               f"[0, ndev)")
        self._ndev, self._rank, self._live = ndev, rank, True
        self._mpi = None if ndev == 1 else _join(ndev, rank, commId)

    def destroy(self):
        if self._live and self._mpi is not None:
            self._mpi.Free()
        self._live = False

    def abort(self):
        # no MPI call: the caller is about to end the job, and a peer may be gone
        self._live = False

    def check_async_error(self):
        """Nothing runs asynchronously here; a destroyed communicator is NCCL's invalid argument."""
        self._check_live("check_async_error")

    # -- collectives ----------------------------------------------------------------------------------------------
    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        where = self._call("allReduce", stream)
        dtype, n = self._sized(datatype, count, where)
        reduce = self._reduction(op, dtype, datatype, where)
        sendbuf, recvbuf = _int(sendbuf, "sendbuf", where), _int(recvbuf, "recvbuf", where)
        if sendbuf != recvbuf and _overlap(sendbuf, n, recvbuf, n):
            raise self._overlapping(where, "sendbuf == recvbuf")
        parts = self._gathered(_memory(sendbuf, n, where)).view(dtype).reshape(self._ndev, -1)
        _memory(recvbuf, n, where)[:] = reduce(parts).view(np.uint8)

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):
        where = self._call("reduceScatter", stream)
        dtype, n = self._sized(datatype, recvcount, where)
        reduce = self._reduction(op, dtype, datatype, where)
        sendbuf, recvbuf = _int(sendbuf, "sendbuf", where), _int(recvbuf, "recvbuf", where)
        if recvbuf != sendbuf + self._rank * n and _overlap(sendbuf, n * self._ndev, recvbuf, n):
            raise self._overlapping(where, "recvbuf == sendbuf + rank * recvcount * itemsize")
        parts = self._gathered(_memory(sendbuf, n * self._ndev, where)).view(dtype).reshape(self._ndev, -1)
        _memory(recvbuf, n, where)[:] = reduce(parts[:, self._rank * recvcount:(self._rank + 1) * recvcount]).view(
            np.uint8)

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):
        where = self._call("allGather", stream)
        _, n = self._sized(datatype, count, where)
        sendbuf, recvbuf = _int(sendbuf, "sendbuf", where), _int(recvbuf, "recvbuf", where)
        if sendbuf != recvbuf + self._rank * n and _overlap(sendbuf, n, recvbuf, n * self._ndev):
            raise self._overlapping(where, "sendbuf == recvbuf + rank * count * itemsize")
        _memory(recvbuf, n * self._ndev, where)[:] = self._gathered(_memory(sendbuf, n, where))

    def broadcast(self, sendbuff, recvbuff, count, datatype, root, stream):
        where = self._call("broadcast", stream)
        _, n = self._sized(datatype, count, where)
        root = _int(root, "root", where)
        if not 0 <= root < self._ndev:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: root={root}; pass a rank in [0, {self._ndev})")
        sendbuff, recvbuff = _int(sendbuff, "sendbuff", where), _int(recvbuff, "recvbuff", where)
        data = np.empty(n, np.uint8)
        if self._rank == root:  # only the root's sendbuff is read
            if sendbuff != recvbuff and _overlap(sendbuff, n, recvbuff, n):
                raise self._overlapping(where, "sendbuff == recvbuff")
            data[:] = _memory(sendbuff, n, where)
        if self._mpi is not None:
            self._mpi.Bcast(data, root)
        _memory(recvbuff, n, where)[:] = data

    # -- point to point -------------------------------------------------------------------------------------------
    def send(self, sendbuf, count, datatype, peer, stream):
        self._point("send", sendbuf, count, datatype, peer, stream)

    def recv(self, recvbuf, count, datatype, peer, stream):
        self._point("recv", recvbuf, count, datatype, peer, stream)

    def _point(self, kind, buf, count, datatype, peer, stream):
        where = f"{kind} on rank {self._rank} of {self._ndev}"
        self._check_live(where)
        _int(stream, "stream", where)
        _, n = self._sized(datatype, count, where)
        peer = _int(peer, "peer", where)
        if not 0 <= peer < self._ndev:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: peer={peer}; pass a rank in [0, {self._ndev})")
        view = _memory(_int(buf, f"{kind}buf", where), n, where)
        alone = getattr(_group, "depth", 0) == 0
        if alone:
            groupStart()
        _group.calls.append((self, kind, view, peer))
        if alone:
            groupEnd()

    def _start(self, calls):
        """Start this communicator's share of a group: ``(request or None, recv buffer or None, peer, self)``."""
        mine = [(kind, view) for kind, view, peer in calls if peer == self._rank]
        sends, recvs = [v for k, v in mine if k == "send"], [v for k, v in mine if k == "recv"]
        if len(sends) != len(recvs) or any(s.size != r.size for s, r in zip(sends, recvs)):
            raise NcclError(_INVALID_USAGE, f"rank {self._rank}: a group sends {[s.size for s in sends]} bytes to "
                                            f"itself and receives {[r.size for r in recvs]}; NCCL would hang. Pair "
                                            f"each send to oneself with a recv of the same size in the same group")
        copies = [s.copy() for s in sends]  # all read before any is written, as the group runs at once
        for r, c in zip(recvs, copies):
            r[:] = c
        pending = []
        for kind, view, peer in calls:
            if peer != self._rank:
                if kind == "recv":
                    pending.append((self._mpi.Irecv([view, view.size, _mpi_byte()], peer), view, peer, self))
                else:
                    pending.append((self._mpi.Isend([view, view.size, _mpi_byte()], peer), None, peer, self))
        return pending

    # -- checks and helpers ---------------------------------------------------------------------------------------
    def _check_live(self, where):
        if not self._live:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: the communicator was destroyed or aborted; make a new one")

    def _call(self, name, stream):
        where = f"{name} on rank {self._rank} of {self._ndev}"
        self._check_live(where)
        _int(stream, "stream", where)
        if getattr(_group, "depth", 0):
            raise NcclError(_INVALID_USAGE, f"{where} inside groupStart/groupEnd: the emulated NCCL groups only "
                                            f"send and recv; call {name} outside the group")
        return where

    @staticmethod
    def _sized(datatype, count, where):
        """The NumPy dtype of ``datatype`` and the bytes of ``count`` elements."""
        if datatype not in _DTYPES:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: datatype={datatype!r}; pass one of the NCCL_* types "
                                               f"(NCCL_INT8 .. NCCL_BFLOAT16)")
        count = _int(count, "count", where)
        return _DTYPES[datatype], count * _DTYPES[datatype].itemsize

    def _reduction(self, op, dtype, datatype, where):
        """``[ndev, count] -> [count]``, reducing in rank order as ``op`` does in NCCL."""
        if op not in _REDUCE and op != NCCL_AVG:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: op={op!r}; pass NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN or "
                                               f"NCCL_AVG")
        if datatype == NCCL_BFLOAT16:
            raise NcclError(_INVALID_ARGUMENT, f"{where}: the emulated NCCL moves bfloat16 but cannot reduce it "
                                               f"(NumPy has no bfloat16); reduce float32 instead")
        if op != NCCL_AVG:
            return lambda parts: _REDUCE[op].reduce(parts, axis=0, dtype=dtype)
        if dtype.kind == "f":  # NCCL's PreMulSum: each contribution scaled by 1/n, then summed
            return lambda parts: np.add.reduce(parts * dtype.type(1 / self._ndev), axis=0, dtype=dtype)

        def truncated_mean(parts):  # NCCL's SumPostDiv: C's integer division, which truncates toward zero
            s = np.add.reduce(parts, axis=0, dtype=dtype)
            q = s // self._ndev
            return q + ((q * self._ndev != s) & (s < 0)).astype(dtype)
        return truncated_mean

    def _gathered(self, mine):
        """Every rank's bytes ``mine``, concatenated in rank order (a copy)."""
        if self._mpi is None:
            return mine.copy()
        out = np.empty(mine.size * self._ndev, np.uint8)
        self._mpi.Allgather(mine.copy(), out)
        return out

    def _overlapping(self, where, allowed):
        return NcclError(_INVALID_ARGUMENT, f"{where}: sendbuf and recvbuf overlap; NCCL works in place only with "
                                            f"{allowed}, and gives garbage otherwise. Use separate buffers")


def _mpi_byte():
    from mpi4py import MPI
    return MPI.BYTE


def _join(ndev, rank, commId):
    """A duplicate of MPI's world for a communicator of ``ndev`` ranks, after every rank checked the same table of
    (ndev, rank, id), so that all of them raise the same error when one is wrong."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise NcclError(_SYSTEM_ERROR, f"NcclCommunicator(ndev={ndev}): the emulated NCCL runs over MPI between "
                                       f"processes and mpi4py is missing ({e}); pip install -e '.[mpi]'") from None
    comm = MPI.COMM_WORLD.Dup()
    table = comm.allgather((ndev, rank, commId))
    size = comm.Get_size()
    for mpi_rank, (n, r, uid) in enumerate(table):
        if (n, r) != (size, mpi_rank):
            comm.Free()
            raise NcclError(_INVALID_ARGUMENT, f"MPI rank {mpi_rank} of {size} made NcclCommunicator(ndev={n}, "
                                               f"rank={r}); the emulated NCCL runs one rank per MPI process: launch "
                                               f"with mpiexec -n ndev and pass MPI's rank")
        if uid != table[0][2]:
            comm.Free()
            raise NcclError(_INVALID_USAGE, f"rank {r} passed a commId other than rank 0's; broadcast rank 0's "
                                            f"get_unique_id() to every rank")
    return comm
