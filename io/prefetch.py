"""Run an iterable in a background thread and keep a few of its items ready.

The converter parses in one while it writes in the other; the loader assembles batches while the model trains.
Numba kernels and h5py calls release the GIL or spend little time holding it, so the two threads really
overlap. An exception in the producer is raised again in the consumer. ``stalls`` counts the times the
consumer found nothing ready, and ``stall_s`` how long it then waited.
"""
import queue
import threading
import time

_ITEM, _END, _ERROR = range(3)


class Prefetcher:
    """Iterate over ``iterable`` from a daemon thread, at most ``depth`` items ahead of the consumer."""

    def __init__(self, iterable, depth=2):
        if depth < 1:
            raise ValueError(f"Prefetcher: depth={depth} must be >= 1")
        self.stalls, self.stall_s = 0, 0.0
        self._queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(iterable,), daemon=True)
        self._thread.start()

    def _produce(self, iterable):
        try:
            for item in iterable:
                if not self._put((_ITEM, item)):
                    return
            self._put((_END, None))
        except BaseException as e:  # handed to the consumer, which raises it
            self._put((_ERROR, e))

    def _put(self, entry):
        """Wait for room; give up (False) once the consumer has closed."""
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def __iter__(self):
        try:
            while True:
                try:
                    kind, item = self._queue.get_nowait()
                except queue.Empty:
                    self.stalls += 1
                    t = time.perf_counter()
                    kind, item = self._queue.get()
                    self.stall_s += time.perf_counter() - t
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise item
                yield item
        finally:
            self.close()

    def close(self):
        """Stop the producer and wait for its thread to end."""
        self._stop.set()
        self._thread.join()
