"""Counts of the crossings between host and device: what stalls a GPU's stream.

Every copy to the device, every copy back and every synchronization (a stream or device sync, or a scalar read
such as ``.item()``) adds to ``COUNTS``. On a GPU the backend's explicit transfers count; under the emulated
device every crossing counts, the implicit ones too, so a test there sees what a GPU would wait for.
Each thread's crossings are also kept apart: a training step reports the ones its own thread made, which stall
it, as ``"transfers"``, and those the loader's and the prefetch's threads made meanwhile, for the batches ahead,
as ``"transfers_ahead"``. The totals alone could not say which step a background copy belonged to.
"""
import threading

FIELDS = ("to_device", "to_host", "syncs", "bytes")


class Counts:
    """Running totals of all threads, safe to add to from the loader's and the prefetch's threads, and each
    thread's own totals beside them. ``keys``: what is counted (``FIELDS`` here; autograd/launches.py counts its
    own)."""

    def __init__(self, keys=FIELDS):
        self.keys = tuple(keys)
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(self.keys, 0)
        self._local = threading.local()

    def _mine(self):
        if not hasattr(self._local, "totals"):
            self._local.totals = dict.fromkeys(self.keys, 0)
        return self._local.totals

    def add(self, added):
        """Add ``added``, a dict of keys to counts."""
        mine = self._mine()  # only this thread writes it: no lock
        with self._lock:
            for k, n in added.items():
                self._totals[k] += n
                mine[k] += n

    def snapshot(self, this_thread=False):
        """The totals so far: of all threads, or (``this_thread``) of the calling one."""
        if this_thread:
            return dict(self._mine())
        with self._lock:
            return dict(self._totals)

    def since(self, snapshot, this_thread=False):
        """What was counted after ``snapshot`` (a dict from :meth:`snapshot` with the same ``this_thread``)."""
        now = self.snapshot(this_thread)
        return {k: now[k] - snapshot[k] for k in self.keys}


COUNTS = Counts()


def to_device(nbytes):
    COUNTS.add({"to_device": 1, "bytes": int(nbytes)})


def to_host(nbytes):
    COUNTS.add({"to_host": 1, "bytes": int(nbytes)})


def sync():
    COUNTS.add({"syncs": 1})
