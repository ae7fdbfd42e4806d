"""How a step prepares the next batch while it computes (``--pipeline``): one of three ways, chosen once when the run
is built (``strategy.py``), which the ``Pipeline`` then asks at every step that may look ahead.

- ``Nothing``: no batch is taken ahead (``--no-pipeline``, or sharded tables on a blocking communicator).
- ``Prefetch`` (tables whole): once step i's lookups are done, batch i+1's keys are sorted and its rows
  ``prefetch``ed into each table's device rows, on a worker thread (on a GPU on a side stream, waited for before
  step i+1 starts) or, on the CPU, in the step where the worker would have started it (``Inline``).
- ``RouteAhead`` (sharded collections on an overlapped communicator, ``--overlap-comm``): once step i's backward
  has started its collectives, batch i+1's key exchange starts (``distributed/keys_ahead.py``).

A model's collections are all whole or all sharded (``Cluster.shard``), so a run needs one of the three, never two.
Each has ``start(take)``: take the next batch (``take()``, its sparse features) and return the step's two hooks
``(after_forward, after_gradients)``; ``wait()``: wait for the work in flight, raising its error; ``close()``.
"""
from concurrent.futures import Future, ThreadPoolExecutor

from gpuemb.autograd import backend, launches


class Nothing:
    """Prepares nothing: the next batch is taken when its step starts."""
    prefetched = skipped = 0

    def start(self, take):
        return None, None

    def wait(self):
        pass

    def close(self):
        pass


class Inline:
    """An executor that runs each job as it is submitted, on the caller's thread; its future holds the result or the
    error, raised where the caller waits, as a worker's would."""

    def submit(self, fn, *args):
        done = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001  handed to the caller at result(), as ThreadPoolExecutor does
            done.set_exception(e)
        return done

    def shutdown(self):
        pass


class Prefetch(Nothing):
    """Prefetches the next batch's rows into the tables of ``collections`` (``EmbeddingCollection``s).

    ``worker_thread``: whether a worker thread prefetches (by default on a device, not on the CPU). On the CPU
    backend the step's BLAS and numba kernels already keep every core busy, so a worker thread only took cores from
    them and made each step 1 to 7 ms slower on 2 cores, for every store (docs/perf/README.md, "The prefetch on the
    CPU"); ``Inline`` makes the same prefetches at the same point of the step, so the results and counts are the
    worker's. Without a thread a device's counts do not depend on how two threads interleave
    (tools/count_step.py)."""

    def __init__(self, collections, worker_thread=None):
        self.collections = collections
        if backend.DEVICE != "cpu" if worker_thread is None else worker_thread:
            # the worker's thread counts everything it launches as the prefetch's (gpuemb.autograd.launches)
            self._worker = ThreadPoolExecutor(1, "gpuemb-prefetch", initializer=launches.phase("prefetch").__enter__)
        else:
            self._worker = Inline()
        self._device, self._stream = backend.current_device(), backend.new_stream()  # the rank's GPU, for the worker
        self._job = None
        self.prefetched = self.skipped = 0  # table prefetches made, and skipped for want of room

    def start(self, take):
        sparse = take()

        def submit():
            # The room is read here, after step i's lookups and before its update: with step i's rows still
            # pinned, so the decision is the same however late the worker runs (the update unpins them).
            rooms = {id(t): t.room() for c in self.collections for t in c.stores}
            self._job = self._worker.submit(self._prefetch, sparse, rooms, backend.record_event())
        return submit, None

    def _prefetch(self, sparse, rooms, queued):
        # The worker thread starts on GPU 0: it takes this rank's. Its side stream waits, on the device, for what the
        # main stream had queued when the prefetch was submitted: step i's lookups, the next batch's upload, and the
        # reads of the arrays an earlier prefetch made (whose memory CuPy may give this stream again). What it then
        # does to a table's rows is ordered against the step's updates by the table's lock (store/ordered.py). It
        # returns an event after all its work, which the main stream waits for (``wait``): the next forward reads
        # the keys it mixed (``collection.table_keys``) even where a table's prefetch stopped before its lock
        # (no room, or admission). No wait on the host, either way.
        with self._device, self._stream:
            backend.wait_event(queued)
            for collection in self.collections:
                for store, keys, tags in collection.table_keys(sparse):
                    done = store.prefetch(keys, room=rooms[id(store)], tags=tags, copy=False)
                    self.prefetched, self.skipped = self.prefetched + done, self.skipped + (not done)
            return backend.record_event()

    def wait(self):
        """Wait for the prefetch in flight, raising its error here; the main stream's later work waits, on the
        device, for everything it queued."""
        job, self._job = self._job, None
        if job is not None:
            backend.wait_event(job.result())

    def close(self):
        self._worker.shutdown()


class RouteAhead(Nothing):
    """Starts the next batch's key exchange for ``collections`` (``ShardedEmbeddingCollection``s on an overlapped
    communicator)."""

    def __init__(self, collections):
        self.collections = collections

    def start(self, take):
        sparse = take()

        def route():
            # on every rank at this point of the step, so the collectives keep one order; once the backward has
            # started the dense buckets and the gradients' all-to-all, which the step waits for before these keys:
            # started after the loss, the keys took the one communication thread for most of the backward, and
            # everything the backward started queued behind them (a rank's timeline, W=2 on 2 busy cores). They
            # travel during the dense step, the row updates and the next batch's start instead
            for collection in self.collections:
                collection.route_ahead(sparse)
        return None, route
