"""Counts of the crossings between host and device: what stalls a GPU's stream.

Every copy to the device, every copy back and every synchronization (a stream or device sync, or a scalar read
such as ``.item()``) adds to ``COUNTS``. On a GPU the backend's explicit transfers count; under the emulated
device every crossing counts, the implicit ones too, so a test there sees what a GPU would wait for.
A training step reports its share (``since``) in the metrics' ``"transfers"``.
"""
import threading

FIELDS = ("to_device", "to_host", "syncs", "bytes")


class Counts:
    """Running totals, safe to add to from the loader's prefetch thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(FIELDS, 0)

    def add(self, to_device=0, to_host=0, syncs=0, nbytes=0):
        with self._lock:
            t = self._totals
            t["to_device"] += to_device
            t["to_host"] += to_host
            t["syncs"] += syncs
            t["bytes"] += int(nbytes)

    def snapshot(self):
        with self._lock:
            return dict(self._totals)

    def since(self, snapshot):
        """What was counted after ``snapshot`` (a dict from :meth:`snapshot`)."""
        now = self.snapshot()
        return {k: now[k] - snapshot[k] for k in FIELDS}


COUNTS = Counts()


def to_device(nbytes):
    COUNTS.add(to_device=1, nbytes=nbytes)


def to_host(nbytes):
    COUNTS.add(to_host=1, nbytes=nbytes)


def sync():
    COUNTS.add(syncs=1)
