"""The Communicator interface: collectives over ranks, checked, under a deadline, with byte counters.

Arrays are row-major ``[n, ...]``. ``alltoallv(send, send_counts)`` splits ``send`` by rows, the first
``send_counts[0]`` rows to rank 0, the next ``send_counts[1]`` to rank 1 and so on, and returns the rows received
in rank order with how many came from each rank. ``reduce_scatter(x)`` reduces ``x [W·n, ...]`` over the ranks
and gives rank r rows ``[r·n, (r+1)·n)`` of the result. Every op returns new arrays of the kind it was given
(NumPy in, NumPy out; CuPy in, CuPy out); counts are host int64 arrays.

Before moving data, every collective exchanges a small header (op, dtype, shape, extra argument, per-peer counts)
among all ranks. Ranks that disagree (a different op, dtype, shape or root) all get the same ``CommError`` naming
the op, the ranks and their shapes, instead of corrupted data or a hang, and alltoallv learns its receive counts
from it. A backend only moves bytes: ``_exchange`` for the headers and one ``_<op>`` method per op.

``bytes_sent[tag]`` adds up what this rank sends to other ranks (never to itself): exact for alltoallv, and for
the other ops the usual algorithms' volume: allreduce ``2 (W-1)/W`` of the array (ring), reduce_scatter
``(W-1)/W`` of it (ring), allgather ``W-1`` copies
of this rank's rows, broadcast ``W-1`` copies from the root. Headers are not counted.
"""
import os
import sys
import threading
from collections import Counter

import numpy as np

from gpuemb.autograd.backend import get_array_module, is_device_array, to_device, to_host

TIMEOUT_ENV = "GPUEMB_COMM_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
OPS = ("alltoallv", "allreduce", "allgather", "broadcast", "barrier", "reduce_scatter")
REDUCE_OPS = ("sum", "max", "min")
DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "int32", "int64", "float16", "uint16", "int8", "uint8",
                                     "uint32", "uint64", "bool"))
REDUCE_DTYPES = DTYPES[:4]  # the types every backend reduces natively
MAX_DIMS = 4
# header fields: op, dtype, ndim, MAX_DIMS dims, extra (root or reduce op), then one count per rank
_OP, _DTYPE, _NDIM, _SHAPE, _EXTRA, _COUNTS = 0, 1, 2, 3, 3 + MAX_DIMS, 4 + MAX_DIMS


class CommError(RuntimeError):
    """A collective was called wrongly: bad arguments, or ranks that disagree."""


def resolve_timeout(timeout_s=None):
    """The deadline of every collective in seconds: ``timeout_s``, else ``$GPUEMB_COMM_TIMEOUT``, else 300."""
    if timeout_s is None:
        raw = os.environ.get(TIMEOUT_ENV)
        if raw is None:
            return DEFAULT_TIMEOUT_S
        try:
            timeout_s = float(raw)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds; set it to e.g. 300") from None
    if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < float("inf")):
        raise ValueError(f"timeout_s={timeout_s!r}; use a finite number of seconds > 0 (default {DEFAULT_TIMEOUT_S})")
    return float(timeout_s)


def header(op, x, world_size, extra=0, counts=None):
    """What this rank tells the others before ``op`` on array ``x`` (None for barrier): an int64 vector."""
    h = np.zeros(_COUNTS + world_size, np.int64)
    h[_OP], h[_EXTRA] = OPS.index(op), extra
    if x is not None:
        h[_DTYPE], h[_NDIM] = DTYPES.index(x.dtype), x.ndim
        h[_SHAPE:_SHAPE + x.ndim] = x.shape
    if counts is not None:
        h[_COUNTS:] = counts
    return h


def describe(h):
    """One rank's header as ``op(float32 [4, 8])``."""
    shape = ", ".join(str(d) for d in h[_SHAPE:_SHAPE + h[_NDIM]])
    return f"{OPS[h[_OP]]}({DTYPES[h[_DTYPE]]} [{shape}])"


def check_agreement(table, rank):
    """Raise ``CommError`` unless the headers of all ranks (``table [W, k]``) describe the same collective.

    alltoallv and allgather may differ in their row counts; everything else must match."""
    ref = table[0]
    op = OPS[ref[_OP]]
    first = _SHAPE + 1 if op in ("alltoallv", "allgather") else _SHAPE
    for r, h in enumerate(table):
        same = (h[_OP] == ref[_OP] and h[_DTYPE] == ref[_DTYPE] and h[_NDIM] == ref[_NDIM]
                and np.array_equal(h[first:_EXTRA], ref[first:_EXTRA]) and h[_EXTRA] == ref[_EXTRA])
        if not same:
            what = {"allreduce": "the same dtype, shape and reduce op",
                    "reduce_scatter": "the same dtype, shape and reduce op",
                    "broadcast": "the same dtype, shape and root",
                    "barrier": "a barrier"}.get(op, "the same dtype and row shape (the row counts may differ)")
            raise CommError(
                f"rank {rank} of {len(table)}: ranks disagree on the collective: rank 0 called {describe(ref)}"
                f"{_extra(ref)}, rank {r} called {describe(h)}{_extra(h)}. Every rank must call the same "
                f"collectives in the same order; {op} needs {what} on every rank")


def _extra(h):
    op = OPS[h[_OP]]
    if op in ("allreduce", "reduce_scatter"):
        return f" op={REDUCE_OPS[h[_EXTRA]]!r}"
    return f" root={h[_EXTRA]}" if op == "broadcast" else ""


def _as_contiguous(x):
    return get_array_module(x).ascontiguousarray(x)


def row_bytes(x):
    """Bytes of one row of ``x [n, ...]``."""
    return int(np.prod(x.shape[1:], dtype=np.int64)) * x.itemsize


def like(template, out):
    """``out`` moved to where ``template`` lives: the device for a CuPy array, else the host."""
    return to_device(out) if is_device_array(template) else to_host(out)


def as_bytes(x):
    """A flat uint8 view of C-contiguous ``x`` (NumPy or CuPy), the unit every backend moves."""
    return x.reshape(-1).view(np.uint8)


class Communicator:
    """Collectives among ``world_size`` ranks; this process is ``rank``. See the module docstring."""

    name = "base"

    def __init__(self, rank, world_size, timeout_s=None, local_rank=0):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.timeout_s = resolve_timeout(timeout_s)
        self.bytes_sent = Counter()
        self._watchdog, self._closed = None, threading.Event()

    def __repr__(self):
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, timeout_s={self.timeout_s})"

    # -- the collectives ------------------------------------------------------------------------------------------
    def alltoallv(self, send, send_counts, tag="alltoallv"):
        """``(recv, recv_counts)``: rows of ``send [n, ...]`` split per peer by ``send_counts [W]``, exchanged."""
        self._check_array("alltoallv", send, min_ndim=1)
        counts = self._check_counts(send, send_counts)
        table = self._agree("alltoallv", send, counts=counts)
        recv_counts = table[:, _COUNTS + self.rank].copy()
        recv = self._alltoallv(_as_contiguous(send), counts, recv_counts)
        self.bytes_sent[tag] += int(counts.sum() - counts[self.rank]) * row_bytes(send)
        return recv, recv_counts

    def allreduce(self, x, op="sum", tag="allreduce"):
        """The elementwise ``op`` (sum, max or min) of ``x`` over all ranks, on every rank."""
        self._check_reduction("allreduce", x, op)
        out = self._allreduce(_as_contiguous(x), op)
        W = self.world_size
        self.bytes_sent[tag] += 2 * (W - 1) * x.nbytes // W
        return out

    def reduce_scatter(self, x, op="sum", tag="reduce_scatter"):
        """This rank's block of the elementwise ``op`` (sum, max or min) over all ranks of ``x [W·n, ...]``: rows
        ``[rank·n, (rank+1)·n)`` of the reduction, ``[n, ...]``. Every rank passes the same shape."""
        W = self.world_size
        self._check_reduction("reduce_scatter", x, op, min_ndim=1)
        if x.shape[0] % W:  # after the ranks agreed on the shape, so that every rank raises this
            raise CommError(f"{self._where('reduce_scatter')}: {x.shape[0]} rows do not split into {W} equal "
                            f"blocks; pad x to a multiple of {W} rows, one block a rank")
        out = self._reduce_scatter(_as_contiguous(x), op)
        self.bytes_sent[tag] += (W - 1) * x.nbytes // W
        return out

    def allgather(self, x, tag="allgather"):
        """The rows of ``x [n_r, ...]`` of every rank r, concatenated in rank order (``n_r`` may differ)."""
        self._check_array("allgather", x, min_ndim=1)
        table = self._agree("allgather", x)
        out = self._allgather(_as_contiguous(x), table[:, _SHAPE].copy())
        self.bytes_sent[tag] += (self.world_size - 1) * x.nbytes
        return out

    def broadcast(self, x, root=0, tag="broadcast"):
        """Rank ``root``'s ``x`` on every rank; the others pass an array of the same shape and dtype."""
        if not (isinstance(root, (int, np.integer)) and 0 <= root < self.world_size):
            raise CommError(f"{self._where('broadcast')}: root={root!r}; use a rank in [0, {self.world_size})")
        self._check_array("broadcast", x)
        self._agree("broadcast", x, extra=root)
        out = self._broadcast(_as_contiguous(x), int(root))
        if self.rank == root:
            self.bytes_sent[tag] += (self.world_size - 1) * x.nbytes
        return out

    def barrier(self):
        """Return once every rank has called barrier."""
        self._agree("barrier", None)

    def reset_bytes(self):
        """The bytes sent per tag since the last reset (a dict), and start counting from zero: call once a step."""
        sent = dict(self.bytes_sent)
        self.bytes_sent.clear()
        return sent

    def abort(self, message):
        """Print ``message`` as one line naming this rank, and end every rank with exit status 1."""
        # one write, so that the line stays whole among the other ranks' (gpuemb/train/cli.py, tell)
        sys.stderr.write(f"gpuemb.comm: rank {self.rank} of {self.world_size}: {message}; aborting every rank\n")
        sys.stderr.flush()
        self._abort_world()

    def close(self):
        """Release what the backend holds; the communicator is unusable afterwards."""
        self._closed.set()
        if self._watchdog is not None:
            self._watchdog.join()

    def _start_watchdog(self, check):
        """Call ``check()`` on a daemon thread every tenth of ``timeout_s`` (at most every second) until ``close``;
        ``check`` calls ``abort`` when an op has outlived its deadline, so the abort comes within 1.1 timeouts."""
        period = min(1.0, self.timeout_s / 10)

        def loop():
            while not self._closed.wait(period):
                check()

        self._watchdog = threading.Thread(target=loop, name=f"gpuemb-{self.name}-watchdog", daemon=True)
        self._watchdog.start()

    def _overdue(self, op):
        return (f"{op} did not complete within {self.timeout_s:g} s (timeout_s, or env {TIMEOUT_ENV}): another "
                f"rank failed, hangs, or never called {op}")

    # -- checks ---------------------------------------------------------------------------------------------------
    def _where(self, op):
        return f"{op} on rank {self.rank} of {self.world_size}"

    def _check_array(self, op, x, min_ndim=0):
        if not (hasattr(x, "dtype") and hasattr(x, "shape")):
            raise CommError(f"{self._where(op)}: wants a NumPy or CuPy array, got {type(x).__name__}")
        if x.dtype not in DTYPES or not min_ndim <= x.ndim <= MAX_DIMS:
            raise CommError(f"{self._where(op)}: got {x.dtype} of shape {x.shape}; pass a {min_ndim}- to "
                            f"{MAX_DIMS}-D array of {', '.join(map(str, DTYPES))}")

    def _check_reduction(self, name, x, op, min_ndim=0):
        """Check ``op`` and ``x`` of a reducing collective, and agree on them with every rank."""
        if op not in REDUCE_OPS:
            raise CommError(f"{self._where(name)}: op={op!r}; use one of {', '.join(REDUCE_OPS)}")
        self._check_array(name, x, min_ndim)
        if x.dtype not in REDUCE_DTYPES:
            raise CommError(f"{self._where(name)}: {x.dtype} {x.shape} cannot be reduced; cast to one of "
                            f"{', '.join(map(str, REDUCE_DTYPES))}")
        self._agree(name, x, extra=REDUCE_OPS.index(op))

    def _check_counts(self, send, send_counts):
        counts = to_host(send_counts)  # counts computed on the GPU are fine; the headers travel on the host
        if counts.shape != (self.world_size,) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise CommError(f"{self._where('alltoallv')}: send_counts={send_counts!r}; pass {self.world_size} "
                            f"non-negative ints, the rows of send for each rank")
        if counts.sum() != send.shape[0]:
            raise CommError(f"{self._where('alltoallv')}: send_counts add up to {counts.sum()} rows but send has "
                            f"shape {send.shape}; the counts must cover its rows exactly")
        return counts.astype(np.int64)

    def _agree(self, op, x, extra=0, counts=None):
        table = self._exchange(header(op, x, self.world_size, extra, counts), op)
        check_agreement(table, self.rank)
        return table

    # -- what a backend implements --------------------------------------------------------------------------------
    def _exchange(self, h, op):
        """Every rank's int64 header ``h`` for ``op``, as a host array ``[W, len(h)]`` (an allgather, under the
        deadline)."""
        raise NotImplementedError

    def _abort_world(self):
        os._exit(1)  # one process is the whole world; no cleanup that could block

    def _alltoallv(self, send, send_counts, recv_counts):
        raise NotImplementedError

    def _allreduce(self, x, op):
        raise NotImplementedError

    def _reduce_scatter(self, x, op):
        raise NotImplementedError

    def _allgather(self, x, rows):
        raise NotImplementedError

    def _broadcast(self, x, root):
        raise NotImplementedError
