"""Collectives that run while the caller computes: ``OverlappedCommunicator`` runs every collective of a
communicator on one thread of its own, in the order the caller issued them.

``start(op, *args)`` queues the collective and returns a :class:`Pending` at once; ``pending.wait()`` returns its
result, or raises what it raised. A plain call (``comm.allreduce(x)``) is a ``start`` and a ``wait``. Every
collective of the wrapped communicator goes through the one thread, so each rank issues them to its backend in the
order its program started them, which is the same on every rank: that is what MPI and NCCL need, and why a second
thread never calls the backend on its own.

With a modelled link (``modelled.py``) the link's wait happens on the thread too, so the caller's time between
``start`` and ``wait`` hides it; each collective's span records when the caller began to wait (``timeline.py``),
and only the time after that is exposed. A rank that dies mid-collective is found by the backend's own timeout, as
without overlap; its error reaches the caller at ``wait``.
"""
import queue
import threading
import time

_STOP = object()


class Pending:
    """A started collective: ``wait()`` gives its result."""

    def __init__(self, comm):
        self._comm, self._done = comm, threading.Event()
        self._result = self._error = None
        self._spans = ()

    @property
    def done(self):
        return self._done.is_set()

    def wait(self):
        """The collective's result, once it is done; its exception if it failed."""
        waited = self._comm.clock.now() if hasattr(self._comm, "clock") else time.perf_counter()
        self._done.wait()
        spans, self._spans = self._spans, ()  # recorded at the first wait: a later one waits for nothing
        if spans:
            self._comm.record_waited(spans, waited)
        if self._error is not None:
            raise self._error
        return self._result


class OverlappedCommunicator:
    """``inner``'s collectives on a thread of their own, in issue order (module docstring)."""

    OPS = ("alltoallv", "allreduce", "reduce_scatter", "allgather", "broadcast", "barrier")

    def __init__(self, inner):
        self.inner = inner
        self.rank, self.world_size, self.local_rank = inner.rank, inner.world_size, inner.local_rank
        self.timeout_s, self.name = inner.timeout_s, f"{inner.name}, overlapped"
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"gpuemb-comm-{inner.rank}", daemon=True)
        self._thread.start()

    def __repr__(self):
        return f"OverlappedCommunicator({self.inner!r})"

    def start(self, op, *args, **kwargs):
        """Queue ``inner.op(*args, **kwargs)``; a :class:`Pending` for its result."""
        if op not in self.OPS:
            raise ValueError(f"OverlappedCommunicator.start: {op!r} is no collective; use one of {', '.join(self.OPS)}")
        if not self._thread.is_alive():
            raise RuntimeError("OverlappedCommunicator: closed, or its thread died; make a new one")
        pending = Pending(self.inner)
        self._jobs.put((pending, getattr(self.inner, op), args, kwargs))
        return pending

    def _serve(self):
        deferring = getattr(self.inner, "deferring", None)  # a modelled link records a span when it is waited for
        while (job := self._jobs.get()) is not _STOP:
            pending, fn, args, kwargs = job
            try:
                if deferring is None:
                    pending._result = fn(*args, **kwargs)
                else:
                    with deferring() as spans:
                        pending._result = fn(*args, **kwargs)
                    pending._spans = tuple(spans)
            except BaseException as e:  # handed to the waiter, who is the one to stop
                pending._error = e
            pending._done.set()

    def drain(self):
        """Wait for every collective started so far."""
        marker = Pending(self.inner)
        self._jobs.put((marker, lambda: None, (), {}))
        marker._done.wait()

    # -- the blocking collectives: started and waited for ----------------------------------------------------------
    def alltoallv(self, send, send_counts, tag="alltoallv"):
        return self.start("alltoallv", send, send_counts, tag).wait()

    def allreduce(self, x, op="sum", tag="allreduce"):
        return self.start("allreduce", x, op, tag).wait()

    def reduce_scatter(self, x, op="sum", tag="reduce_scatter"):
        return self.start("reduce_scatter", x, op, tag).wait()

    def allgather(self, x, tag="allgather"):
        return self.start("allgather", x, tag).wait()

    def broadcast(self, x, root=0, tag="broadcast"):
        return self.start("broadcast", x, root, tag).wait()

    def barrier(self):
        return self.start("barrier").wait()

    # -- the rest is the wrapped communicator's, once what was started is done ------------------------------------
    @property
    def bytes_sent(self):
        return self.inner.bytes_sent

    def reset_bytes(self):
        self.drain()
        return self.inner.reset_bytes()

    def __getattr__(self, name):  # step_summary, timeline, link, clock: a modelled link's
        return getattr(self.inner, name)

    def abort(self, message):
        self.inner.abort(message)

    def close(self):
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()
        self.inner.close()
