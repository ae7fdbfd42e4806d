"""A lock that also orders device work: what one stream queues under it runs after what other streams queued under
it before, on the device, with no wait on the host.

A table's rows are changed from two threads on two streams: the step's lookups and row updates on the main stream,
and the next batch's prefetch on the pipeline's side stream (train/loop.py). A plain lock orders when their work is
queued, not when it runs: the prefetch's writes could run beside an update queued before them. So on each release
the holder records an event on its stream, and on each acquire the new holder's stream waits for the last event of
every other stream (once per event). On the CPU there are no events and this is a lock.
"""
import threading

from gpuemb.autograd import backend


class OrderedLock:
    """``with lock:``: a ``threading.Lock`` whose holders' device work runs in the order they held it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._last = {}  # stream ptr -> the event recorded when a holder on that stream last let go
        self._waited = {}  # (waiting ptr, other ptr) -> the event it last waited on

    def __enter__(self):
        self._lock.acquire()
        if self._last:
            me = backend.current_stream().ptr
            for other, event in self._last.items():
                if other != me and self._waited.get((me, other)) is not event:
                    backend.wait_event(event)
                    self._waited[(me, other)] = event
        return self

    def __exit__(self, *exc):
        try:
            event = backend.record_event()
            if event is not None:
                self._last[backend.current_stream().ptr] = event
        finally:
            self._lock.release()
        return False
