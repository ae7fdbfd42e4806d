"""The training step and the stream of batches it eats, with everything a resume needs of both.

A step is: forward, ``bce_with_logits`` against the labels (``[B]``, or ``[B, T]`` for T tasks), a check that
the loss is finite, backward (which updates the touched embedding rows in place, with the table's rule), then
the dense optimizer's step. The loss is checked *before* the backward, so a NaN never reaches the weights.

All randomness of a run is counter-based, so its state is a handful of counters saved with the rest: dropout
masks come from (seed, the MLP's step), which is module extra state; the shuffle from (seed, epoch, window) and
the loader's position; new embedding rows from (seed, key); synthetic rows from (seed, split, row).

A step marks its phases (``gpuemb.autograd.launches``), so what it launches and reads back is counted by phase:
``upload`` (the labels), ``loss`` (the loss, its read and its checks), ``communication`` (the dense gradients'
allreduce), ``dense_optimizer`` and ``prefetch`` (the next batch's rows: the pipeline's worker thread counts nothing
else), beside the model's (``lookup``, ``interaction``, ``mlp_forward``) and the backward's, which follow each
Function's forward phase. The same marks time the phases, with ``--phase-times`` (``phases.py``).
"""
import math
from concurrent.futures import Future, ThreadPoolExecutor

from gpuemb.autograd import backend, bce_with_logits, launches
from gpuemb.autograd.backend import get_array_module
from gpuemb.store.collection import EmbeddingCollection

from .errors import ConfigError, DivergedError, TrainError
from .optimizer import scaled_step
from .phases import NO_TIMER


class Trainer:
    """Steps ``model`` on batches: dense parameters by ``optimizer``, embedding rows by their tables.

    ``tables``: ``{name: EmbeddingTable}``. Their lr follows the optimizer's schedule: at each step it is
    ``embedding_lr × lr / base_lr``, with ``lr`` the schedule's dense lr at that step and ``base_lr`` its peak.
    ``timer``: a ``phases.PhaseTimer`` that times each step's phases (``--phase-times``); by default none.
    """

    def __init__(self, model, optimizer, tables, base_lr, embedding_lr, cluster, scaler=None, timer=NO_TIMER):
        self.model, self.optimizer, self.tables, self.scaler = model, optimizer, tables, scaler  # scaler: fp16
        self.timer = timer
        self.cluster = cluster  # a cluster.Cluster: batches are this rank's parts, W = 1 in a plain run
        self.base_lr, self.embedding_lr = base_lr, embedding_lr
        self.step, self.samples = 0, 0  # steps taken and samples trained on, in all (resumes included)

    @property
    def lrs(self):
        """(dense lr, embedding lr) of the next step."""
        lr = self.optimizer.lr
        return lr, self.embedding_lr * lr / self.base_lr

    def train_step(self, batch, after_forward=None, after_gradients=None):
        """One step on ``batch`` (label, dense, sparse arrays); returns the loss as a float.

        ``after_forward()``, if given, is called once the forward (and so every lookup of the step) is done, and
        ``after_gradients()`` once the step's gradient collectives are started (the dense buckets and the
        embeddings' all-to-all, or ``--deterministic``'s gather), before the dense optimizer: a collective it starts
        then queues behind those on an overlapped communicator, not ahead of them."""
        lr, embedding_lr = self.lrs
        with self.timer.step():
            for table in self.tables.values():
                table.lr = embedding_lr
            self.cluster.begin_step()
            self.model.train()
            if self.cluster.slices is None:
                value = self._whole_step(batch, after_forward, after_gradients)
            else:
                value = self._sliced_step(batch, after_forward, after_gradients)
            self.cluster.settle()  # rows whose gradients travelled during the dense step (overlapped) update now
        self.step += 1
        self.samples += batch.rows * self.cluster.world_size
        self.cluster.end_step()
        return value

    def _whole_step(self, batch, after_forward, after_gradients):
        logits = self.model(batch.dense, batch.sparse)
        _after(after_forward)
        xp = get_array_module(logits.data)
        labels = self._labels(logits, batch.label)
        with launches.phase("loss"):
            loss = bce_with_logits(logits, labels)
            # The step's one read from the device: the loss, and whether the last step left the dense parameters
            # finite (checked here rather than after that step's update, so a step waits for the device only once).
            local, finite = backend.to_host(xp.stack([loss.data.astype(xp.float32),
                                                      finite_flag(self.model, xp, self.optimizer)]))
            value = self.cluster.mean(float(local))  # the global batch's: every rank agrees whether it is finite
            self._check(value, finite)
        self.optimizer.zero_grad()
        if self.scaler is None:
            loss.backward(on_ready=self.cluster.grad_ready)  # an overlapped allreduce starts its buckets in it
            _after(after_gradients)
            with launches.phase("communication"):
                self.cluster.allreduce()
            with launches.phase("dense_optimizer"):
                self.optimizer.step()
        else:  # --precision fp16: the step is skipped, rows and all, where a gradient overflowed
            _after(after_gradients)  # before it: its backward, allreduce and check block in one call
            scaled_step(loss, self.optimizer, self.tables, self.scaler, self.cluster)
        return value

    def _sliced_step(self, batch, after_forward, after_gradients):
        """``--deterministic``: the lookups once, the head slice by slice, the lookups' backward once on the slices'
        gradients, the dense gradients added in slice order (``slices.py``)."""
        slices = self.cluster.slices
        embedded = self.model.embed(batch.sparse)
        _after(after_forward)
        self.optimizer.zero_grad()
        sums, gys = slices.backward(self.model, batch, embedded, self._labels)
        xp = get_array_module(sums)
        # nothing is updated yet: the dense gradients wait in the slices, the rows for their lookups' backward
        with launches.phase("loss"):
            value = slices.loss(sums)
            self._check(value, backend.to_host(finite_flag(self.model, xp, self.optimizer)))
        for e, gy in zip(embedded, gys):
            e.backward(gy)
        with launches.phase("communication"):
            self.cluster.allreduce()
        _after(after_gradients)
        with launches.phase("dense_optimizer"):
            self.optimizer.step()
        return value

    def _labels(self, logits, labels):
        """``labels`` as the loss takes them, or a TrainError where they cannot match the logits."""
        if tuple(labels.shape) != logits.shape:
            raise TrainError(f"step {self.step + 1}: the model gives logits of shape {logits.shape} and the "
                             f"labels have shape {tuple(labels.shape)}; a model of {labels.shape[1:] or 1} tasks "
                             "fits this data")
        with launches.phase("upload"):
            return get_array_module(logits.data).asarray(labels, logits.dtype)

    def _check(self, value, finite):
        """DivergedError unless the step's loss ``value`` and the dense parameters (``finite``) are finite."""
        lr, embedding_lr = self.lrs
        if not math.isfinite(value):
            raise DivergedError(f"the loss became {value} at step {self.step + 1} (lr {lr:g}, embedding lr "
                                f"{embedding_lr:g})")
        if not finite:
            raise DivergedError(f"after step {self.step} the dense parameter {non_finite(self.model)} holds NaN or "
                                f"inf (lr {lr:g}, embedding lr {embedding_lr:g})")

    def state_dict(self):
        """The dense model, its extra state (the dropout counters), the optimizer and the counters."""
        return {"model": self.model.state_dict(), "module_state": self.model.extra_states(),
                "optimizer": self.optimizer.state_dict(), "step": self.step, "samples": self.samples,
                **({"scaler": self.scaler.state_dict()} if self.scaler else {})}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.load_extra_states(state["module_state"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.samples = int(state["step"]), int(state["samples"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])


def _after(hook):
    """Call a step's hook, if any: the pipeline's start of the next batch's prefetch, or of its key exchange."""
    if hook is not None:
        with launches.phase("prefetch"):
            hook()


def _finite(model, xp):
    """Per dense parameter of ``model``, whether it is all finite: a device array, nothing read yet."""
    return xp.stack([xp.isfinite(p.data).all() for _, p in model.named_parameters()] or [xp.asarray(True)])


def finite_flag(model, xp, optimizer=None):
    """1.0 where every dense parameter of ``model`` is finite, else 0.0, as a device scalar of float32.

    A dead ReLU net can keep the loss finite for a while; the weights tell at once. No read: a ``bool()`` per
    parameter would stall a GPU once per layer. Where ``optimizer`` holds every parameter in its flat buffers
    (optim/flat.py), one reduction a buffer, else one a parameter."""
    groups = getattr(optimizer, "groups", None)
    if groups and {id(p) for _, p in model.named_parameters()} <= {id(optimizer.params[n]) for g in groups
                                                                    for n in g.names}:
        return xp.stack([xp.isfinite(g.data).all() for g in groups]).all().astype(xp.float32)
    return _finite(model, xp).all().astype(xp.float32)


def non_finite(model):
    """The name of the first dense parameter of ``model`` holding NaN or inf, or None (one read)."""
    params = [name for name, _ in model.named_parameters()]
    if not params:
        return None
    finite = backend.to_host(_finite(model, get_array_module(model.parameters()[0].data)))
    return None if finite.all() else params[int(finite.argmin())]  # argmin of booleans: the first False


class Batches:
    """Batches of a loader across epochs, endlessly; ``state_dict()`` is the loader's exact position.

    Use as a context manager, so the loader's prefetch thread stops when the loop does.
    """

    def __init__(self, loader):
        if len(loader) == 0:
            raise ConfigError(f"--batch-size: the training data has {loader.source.n_rows} rows, fewer than one "
                              f"batch of {loader.config.batch_size}; lower --batch-size")
        self.loader = loader
        self._it = None

    def __iter__(self):
        while True:
            yield from self.loader

    def __enter__(self):
        self._it = iter(self)
        return self._it

    def __exit__(self, *exc):
        self._it.close()

    @property
    def epoch(self):
        return self.loader.epoch

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


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


class Pipeline:
    """Steps a Trainer on Batches; with ``overlap``, the next batch is prepared while this one computes.

    Three things overlap: the loader's thread assembles batches ahead; batch i+1 is taken from it as step i
    starts; once step i's backward has started its collectives, sharded collections on an overlapped communicator
    start i+1's key exchange (``--overlap-comm``, distributed/keys_ahead.py); and once step i's lookups are done, a
    worker thread sorts i+1's keys and
    ``prefetch``es its rows into
    each table's device rows (on a GPU on a side stream, waited for before step i+1 starts), while step i's MLPs
    run. Step i+1's lookups then find their unique keys and pinned slots ready. The results are the same bit for
    bit with or without the overlap: a prefetch only moves rows and pins them, and a row is read at its lookup,
    after step i's update. A prefetch that might not fit beside step i's pinned rows is skipped (the lookup then
    does the work), and none is made across an evaluation or a checkpoint (``step(ahead=False)``), which must see
    the tables as the step left them.

    ``state_dict()`` is the loader's position after the last batch *trained*, not the one taken ahead.

    On the CPU backend the prefetch runs in the step, where the worker would have started it (``Inline``): the
    step's BLAS and numba kernels already keep every core busy, so a worker thread only took cores from them and
    made each step 1 to 7 ms slower on 2 cores, for every store (docs/perf/README.md, "The prefetch on the CPU").
    It makes the same prefetches at the same point of the step, so the results and counts are the worker's.
    ``worker_thread``: whether a worker thread prefetches (by default on a device, not on the CPU); without one a
    device's counts do not depend on how two threads interleave (tools/count_step.py).
    """

    def __init__(self, trainer, batches, overlap=True, worker_thread=None):
        self.trainer, self.batches, self.overlap = trainer, batches, overlap
        self.collections = [m for m in trainer.model.modules() if isinstance(m, EmbeddingCollection)]
        # sharded collections on an overlapped communicator start the next batch's key exchange in the step
        self.routed = [m for m in trainer.model.modules() if hasattr(getattr(m, "comm", None), "start")] \
            if overlap else []
        self._it = self._ahead = self._job = self._state = None  # _state: after the last batch trained
        self._worker = None
        if overlap and self.collections:
            if backend.DEVICE != "cpu" if worker_thread is None else worker_thread:
                # the worker's thread counts everything it launches as the prefetch's (gpuemb.autograd.launches)
                self._worker = ThreadPoolExecutor(1, "gpuemb-prefetch",
                                                  initializer=launches.phase("prefetch").__enter__)
            else:
                self._worker = Inline()
        self._device, self._stream = backend.current_device(), backend.new_stream()  # the rank's GPU, for the worker
        self.prefetched = self.skipped = 0  # table prefetches made, and skipped for want of room

    def __enter__(self):
        self._it = self.batches.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._wait()
        finally:
            if self._worker is not None:
                self._worker.shutdown()
            self.batches.__exit__(*exc)

    @property
    def epoch(self):
        return self.state_dict()["epoch"]

    def state_dict(self):
        return dict(self._state) if self._state is not None else self.batches.state_dict()

    def step(self, ahead=True):
        """One training step; returns its loss. ``ahead``: prepare the next batch during it."""
        self._wait()
        batch, state = self._take()
        hook = route = None
        if ahead and (self._worker is not None or self.routed):
            self._ahead = (next(self._it), self.batches.state_dict())
            hook = self._submitter(self._ahead[0].sparse) if self._worker is not None else None
            route = self._router(self._ahead[0].sparse) if self.routed else None
        loss = self.trainer.train_step(batch, after_forward=hook, after_gradients=route)
        self._state = state
        return loss

    def _take(self):
        if self._ahead is not None:
            taken, self._ahead = self._ahead, None
            return taken
        return next(self._it), self.batches.state_dict()

    def _router(self, sparse):
        def route():
            # on every rank at this point of the step, so the collectives keep one order; once the backward has
            # started the dense buckets and the gradients' all-to-all, which the step waits for before these keys:
            # started after the loss, the keys took the one communication thread for most of the backward, and
            # everything the backward started queued behind them (a rank's timeline, W=2 on 2 busy cores). They
            # travel during the dense step, the row updates and the next batch's start instead
            for collection in self.routed:
                collection.route_ahead(sparse)
        return route

    def _submitter(self, sparse):
        def submit():
            # The room is read here, after step i's lookups and before its update: with step i's rows still
            # pinned, so the decision is the same however late the worker runs (the update unpins them).
            rooms = {id(t): t.room() for c in self.collections for t in c.stores}
            self._job = self._worker.submit(self._prefetch, sparse, rooms, backend.record_event())
        return submit

    def _prefetch(self, sparse, rooms, queued):
        # The worker thread starts on GPU 0: it takes this rank's. Its side stream waits, on the device, for what the
        # main stream had queued when the prefetch was submitted: step i's lookups, the next batch's upload, and the
        # reads of the arrays an earlier prefetch made (whose memory CuPy may give this stream again). What it then
        # does to a table's rows is ordered against the step's updates by the table's lock (store/ordered.py). It
        # returns an event after all its work, which the main stream waits for (``_wait``): the next forward reads
        # the keys it mixed (``collection.table_keys``) even where a table's prefetch stopped before its lock
        # (no room, or admission). No wait on the host, either way.
        with self._device, self._stream:
            backend.wait_event(queued)
            for collection in self.collections:
                for store, keys, tags in collection.table_keys(sparse):
                    done = store.prefetch(keys, room=rooms[id(store)], tags=tags, copy=False)
                    self.prefetched, self.skipped = self.prefetched + done, self.skipped + (not done)
            return backend.record_event()

    def _wait(self):
        """Wait for the prefetch in flight, raising its error here; the main stream's later work waits, on the
        device, for everything it queued."""
        job, self._job = self._job, None
        if job is not None:
            backend.wait_event(job.result())
