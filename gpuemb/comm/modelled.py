"""A communicator with a modelled link: any backend's collectives, each taking as long as a given link would.

``ModelledCommunicator(inner, link)`` runs every collective on ``inner`` (local, mpi, nccl) and returns its real
result; then it waits until ``issued + link.seconds(messages, bytes)``, the messages and bytes being what the
collective's algorithm puts on the link (``traffic.py``; the link and its presets in ``link.py``). So a collective
takes ``max(real, modelled)``: the real transport stands in for the link's data movement, and the link cannot
finish before the data has arrived. Where the real transport is slower than the link (MPI between processes
against NVLink), the step shows the real time, and the span's ``returned`` says so. On a GPU the device is waited
for before the real time is taken, since NCCL's calls return as soon as they are queued.

Each collective is recorded on a timeline (``timeline.py``), by step. ``reset_bytes`` marks the steps: the
training loop calls it as a step begins and as it ends (``Cluster.begin_step``, ``end_step``), so a call with no
step open begins one and the next ends it. ``step_summary()`` gives compute, communication and exposed
communication per step since its last call, once per train record.

The clock is ``clock.now()`` and ``clock.wait_until(t)``: ``WallClock`` by default, and a test passes a
``ManualClock`` to see the waits without timing anything.
"""
import contextlib
import dataclasses
import threading
import time

from gpuemb.autograd import backend

from . import traffic
from .base import row_bytes
from .timeline import Span, Timeline

SPIN_S = 2e-4  # time.sleep may overshoot by this much; the last stretch of a wait is spun instead


class WallClock:
    """``time.perf_counter``, and a wait that sleeps, then spins the last ``SPIN_S``."""

    now = staticmethod(time.perf_counter)

    @staticmethod
    def wait_until(t):
        left = t - time.perf_counter()
        if left > SPIN_S:
            time.sleep(left - SPIN_S)
        while time.perf_counter() < t:
            pass


class ManualClock:
    """A clock that moves only when told (``advance``) or waited on: tests see every wait without timing one."""

    def __init__(self, t=0.0):
        self.t, self.waits = t, []  # the deadlines waited for, in order

    def now(self):
        return self.t

    def wait_until(self, t):
        self.waits.append(t)
        self.t = max(self.t, t)

    def advance(self, seconds):
        self.t += seconds


class ModelledCommunicator:
    """``inner``'s collectives over ``link`` (a ``link.Link``), recorded on a timeline; see the module docstring."""

    def __init__(self, inner, link, clock=None):
        self.inner, self.link, self.clock = inner, link, clock or WallClock()
        self.rank, self.world_size, self.local_rank = inner.rank, inner.world_size, inner.local_rank
        self.timeout_s, self.name = inner.timeout_s, f"{inner.name} over {link.name}"
        self._timeline = Timeline()
        self._deferred = threading.local()

    def __repr__(self):
        return f"ModelledCommunicator({self.inner!r}, {self.link})"

    @property
    def bytes_sent(self):
        return self.inner.bytes_sent

    # -- the collectives: the real one, then the link's wait ------------------------------------------------------
    def alltoallv(self, send, send_counts, tag="alltoallv"):
        issued, before = self.clock.now(), self.bytes_sent[tag]
        recv, recv_counts = self.inner.alltoallv(send, send_counts, tag)
        sent = self.bytes_sent[tag] - before  # counted by the backend: no second read of counts on a GPU
        received = int(recv_counts.sum() - recv_counts[self.rank]) * row_bytes(send)
        self._settle("alltoallv", tag, issued, traffic.alltoallv(self.world_size, sent, received))
        return recv, recv_counts

    def allreduce(self, x, op="sum", tag="allreduce"):
        issued = self.clock.now()
        out = self.inner.allreduce(x, op, tag)
        self._settle("allreduce", tag, issued, traffic.allreduce(self.world_size, x.nbytes))
        return out

    def reduce_scatter(self, x, op="sum", tag="reduce_scatter"):
        issued = self.clock.now()
        out = self.inner.reduce_scatter(x, op, tag)
        self._settle("reduce_scatter", tag, issued, traffic.reduce_scatter(self.world_size, x.nbytes))
        return out

    def allgather(self, x, tag="allgather"):
        issued = self.clock.now()
        out = self.inner.allgather(x, tag)
        self._settle("allgather", tag, issued, traffic.allgather(self.world_size, out.nbytes - x.nbytes))
        return out

    def broadcast(self, x, root=0, tag="broadcast"):
        issued = self.clock.now()
        out = self.inner.broadcast(x, root, tag)
        self._settle("broadcast", tag, issued, traffic.broadcast(self.world_size, x.nbytes))
        return out

    def barrier(self):
        issued = self.clock.now()
        self.inner.barrier()
        self._settle("barrier", "barrier", issued, traffic.barrier(self.world_size))

    def _settle(self, op, tag, issued, payload):
        """Wait out the link for ``payload`` (messages, bytes) and the header, and record the collective."""
        backend.synchronize()  # NCCL only queued the collective: its real time ends when the device is done
        returned = self.clock.now()
        messages, nbytes = traffic.with_header(self.world_size, payload)
        modelled = self.link.seconds(messages, nbytes)
        self.clock.wait_until(issued + modelled)
        span = Span(op, tag, messages, nbytes, modelled, issued, issued, returned, self.clock.now())
        kept = getattr(self._deferred, "spans", None)
        if kept is None:
            self._timeline.record(span)  # a blocking call: waited for as it was issued
        else:
            kept.append(span)

    @contextlib.contextmanager
    def deferring(self):
        """Keep the spans of this thread's collectives back, in the list it yields, instead of recording them: an
        overlapped collective's (``overlap.py``) is recorded by ``record_waited`` once the caller waits for it."""
        self._deferred.spans = []
        try:
            yield self._deferred.spans
        finally:
            self._deferred.spans = None

    def record_waited(self, spans, waited):
        """Record ``spans`` of a collective that its caller began to wait for at ``waited``."""
        for span in spans:
            self._timeline.record(dataclasses.replace(span, waited=waited))

    # -- the timeline ---------------------------------------------------------------------------------------------
    def reset_bytes(self):
        """``inner``'s bytes per tag since the last call; also a step's mark (module docstring)."""
        if self._timeline.in_step:
            self._timeline.end_step(self.clock.now())
        else:
            self._timeline.begin_step(self.clock.now())
        return self.inner.reset_bytes()

    def timeline(self):
        """The finished steps since the last ``step_summary()``: ``timeline.Step`` objects with their spans."""
        return self._timeline.steps()

    def step_summary(self):
        """``{"link", "steps", "compute_s", "comm_s", "exposed_comm_s", "modelled_s"}``: seconds per step,
        averaged over the steps since the last call, which are then forgotten."""
        return {"link": self.link.name, **self._timeline.summary()}

    # -- the rest is the backend's --------------------------------------------------------------------------------
    def abort(self, message):
        self.inner.abort(message)

    def close(self):
        self.inner.close()
