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

Hosts: given ``local_link`` and ``local_ranks`` L (ranks ``[h·L, (h + 1)·L)`` make host h), an alltoallv's
peers on this rank's host are reached over ``local_link`` (e.g. NVLink) and the others over ``link`` (e.g.
InfiniBand), as ``gpuemb.sharding.estimate`` prices them: each link carries one message a peer on it and the larger
of what the rank sends and receives over it, the header crosses hosts, and the two links move at once, so the
collective takes the slower of the two. The ring collectives cross hosts and stay on ``link``. With one host
(L = W) every peer is on ``local_link``. The split needs each peer's counts, which a GPU run may hold on the
device: one read of them an alltoallv, paid only by a run over hosts.

The clock is ``clock.now()`` and ``clock.wait_until(t)``: ``WallClock`` by default, and a test passes a
``ManualClock`` to see the waits without timing anything.
"""
import contextlib
import dataclasses
import threading
import time

import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import to_host

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

    def __init__(self, inner, link, clock=None, local_link=None, local_ranks=None):
        self.inner, self.link, self.clock = inner, link, clock or WallClock()
        self.rank, self.world_size, self.local_rank = inner.rank, inner.world_size, inner.local_rank
        self.timeout_s, self.name = inner.timeout_s, f"{inner.name} over {link.name}"
        self.local_link, self.near = None, None  # near[p]: peer p shares this rank's host (None: no hosts)
        if local_link is not None:
            W, L = self.world_size, local_ranks
            if not (isinstance(L, int) and 0 < L <= W and W % L == 0):
                raise ValueError(f"ModelledCommunicator: local_ranks={L!r} for a local link; give the ranks of a "
                                 f"host, a divisor of the {W} ranks")
            if L == W:  # one host: every peer is on the local link
                self.link, self.name = local_link, f"{inner.name} over {local_link.name}"
            elif L > 1:
                self.local_link, self.name = local_link, f"{self.name} between hosts of {L}, {local_link.name} within"
                host = np.arange(W) // L
                self.near = (host == host[self.rank]) & (np.arange(W) != self.rank)
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
        if self.near is not None:
            self._settle("alltoallv", tag, issued, *self._over_hosts(send, send_counts, recv_counts))
            return recv, recv_counts
        sent = self.bytes_sent[tag] - before  # counted by the backend: no second read of counts on a GPU
        received = int(recv_counts.sum() - recv_counts[self.rank]) * row_bytes(send)
        self._settle("alltoallv", tag, issued, traffic.alltoallv(self.world_size, sent, received))
        return recv, recv_counts

    def _over_hosts(self, send, send_counts, recv_counts):
        """``(far, near)``: an alltoallv's (messages, bytes) between hosts and within this rank's (module
        docstring)."""
        sent = np.asarray(to_host(send_counts), np.int64) * row_bytes(send)
        received = np.asarray(to_host(recv_counts), np.int64) * row_bytes(send)
        near = self.near
        far = ~near
        far[self.rank] = False
        return ((int(far.sum()), int(max(sent[far].sum(), received[far].sum()))),
                (int(near.sum()), int(max(sent[near].sum(), received[near].sum()))))

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

    def _settle(self, op, tag, issued, payload, near=None):
        """Wait out the link for ``payload`` (messages, bytes) and the header, and the local link for ``near`` at
        once, and record the collective."""
        backend.synchronize()  # NCCL only queued the collective: its real time ends when the device is done
        returned = self.clock.now()
        messages, nbytes = traffic.with_header(self.world_size, payload)
        modelled = self.link.seconds(messages, nbytes)
        if near is not None:  # the two links move at once: the slower one sets the collective's time
            modelled = max(modelled, self.local_link.seconds(*near))
            messages, nbytes = messages + near[0], nbytes + near[1]
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
        """``{"link", "steps", "compute_s", "comm_s", "exposed_comm_s", "modelled_s", ..., "exposed_by_tag_s"}``:
        seconds per step (``timeline.py``), averaged over the steps since the last call, which are then forgotten."""
        link = self.link.name if self.local_link is None else \
            f"{self.link.name} between hosts, {self.local_link.name} within"
        return {"link": link, **self._timeline.summary()}

    # -- the rest is the backend's --------------------------------------------------------------------------------
    def abort(self, message):
        self.inner.abort(message)

    def close(self):
        self.inner.close()
