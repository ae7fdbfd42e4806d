"""The trainer and the stream of batches it eats, with everything a resume needs of both.

A step is: forward, ``bce_with_logits`` against the labels (``[B]``, or ``[B, T]`` for T tasks), a check that
the loss is finite, backward (which updates the touched embedding rows in place, with the table's rule), then
the dense optimizer's step. The loss is checked *before* the backward, so a NaN never reaches the weights. How a
run's step does it (plain, fp16's loss-scaled, ``--deterministic``'s sliced: ``steps.py``) and how it prepares the
next batch (``ahead.py``) are chosen once, when the run is built (``strategy.py``).

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

from gpuemb.autograd import backend, launches
from gpuemb.autograd.backend import get_array_module

from .errors import ConfigError, DivergedError, TrainError
from .phases import NO_TIMER


class Trainer:
    """Steps ``model`` on batches: dense parameters by ``optimizer``, embedding rows by their tables.

    ``tables``: ``{name: EmbeddingTable}``. Their lr follows the optimizer's schedule: at each step it is
    ``embedding_lr × lr / base_lr``, with ``lr`` the schedule's dense lr at that step and ``base_lr`` its peak.
    ``kind``: what a step does (``steps.py``: the plain step, fp16's loss-scaled one or ``--deterministic``'s
    sliced one), chosen once when the run is built (``strategy.py``).
    ``timer``: a ``phases.PhaseTimer`` that times each step's phases (``--phase-times``); by default none.
    """

    def __init__(self, model, optimizer, tables, base_lr, embedding_lr, cluster, kind, timer=NO_TIMER):
        self.model, self.optimizer, self.tables, self.kind = model, optimizer, tables, kind
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
            value = self.kind(self, batch, after_forward, after_gradients)
            self.cluster.settle()  # rows whose gradients travelled during the dense step (overlapped) update now
        self.step += 1
        self.samples += batch.rows * self.cluster.world_size
        self.cluster.end_step()
        return value

    def labels(self, logits, labels):
        """``labels`` as the loss takes them, or a TrainError where they cannot match the logits."""
        if tuple(labels.shape) != logits.shape:
            raise TrainError(f"step {self.step + 1}: the model gives logits of shape {logits.shape} and the "
                             f"labels have shape {tuple(labels.shape)}; a model of {labels.shape[1:] or 1} tasks "
                             "fits this data")
        with launches.phase("upload"):
            return get_array_module(logits.data).asarray(labels, logits.dtype)

    def check(self, value, finite):
        """DivergedError unless the step's loss ``value`` and the dense parameters (``finite``) are finite."""
        lr, embedding_lr = self.lrs
        if not math.isfinite(value):
            raise DivergedError(f"the loss became {value} at step {self.step + 1} (lr {lr:g}, embedding lr "
                                f"{embedding_lr:g})")
        if not finite:
            raise DivergedError(f"after step {self.step} the dense parameter {non_finite(self.model)} holds NaN or "
                                f"inf (lr {lr:g}, embedding lr {embedding_lr:g})")

    def state_dict(self):
        """The dense model, its extra state (the dropout counters), the optimizer, the counters, and the step
        kind's own (fp16's scaler)."""
        return {"model": self.model.state_dict(), "module_state": self.model.extra_states(),
                "optimizer": self.optimizer.state_dict(), "step": self.step, "samples": self.samples,
                **self.kind.state_dict()}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.load_extra_states(state["module_state"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.samples = int(state["step"]), int(state["samples"])
        self.kind.load_state_dict(state)


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


class Pipeline:
    """Steps a Trainer on Batches; with ``ahead`` (``ahead.py``, chosen when the run is built), the next batch is
    prepared while this one computes.

    Three things overlap: the loader's thread assembles batches ahead; batch i+1 is taken from it as step i
    starts; and ``ahead`` starts batch i+1's preparation at its point of step i: with the tables whole, its rows'
    prefetch once step i's lookups are done, while step i's MLPs run; with sharded collections on an overlapped
    communicator, its key exchange once step i's backward has started its collectives. Step i+1's lookups then
    find their unique keys and pinned slots, or their keys routed, ready. The results are the same bit for bit
    with or without the overlap: a prefetch only moves rows and pins them, and a row is read at its lookup, after
    step i's update; the keys go the same way in the same order. A prefetch that might not fit beside step i's
    pinned rows is skipped (the lookup then does the work), and nothing is prepared across an evaluation or a
    checkpoint (``step(ahead=False)``), which must see the tables as the step left them.

    ``state_dict()`` is the loader's position after the last batch *trained*, not the one taken ahead.
    """

    def __init__(self, trainer, batches, ahead):
        self.trainer, self.batches, self.ahead = trainer, batches, ahead
        self._it = self._ahead = self._state = None  # _ahead: (batch, position) taken ahead; _state: after the last

    def __enter__(self):
        self._it = self.batches.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._wait()
        finally:
            self.ahead.close()
            self.batches.__exit__(*exc)

    @property
    def epoch(self):
        return self.state_dict()["epoch"]

    @property
    def prefetched(self):
        """Table prefetches made (none unless the tables are whole)."""
        return self.ahead.prefetched

    @property
    def skipped(self):
        """Table prefetches skipped for want of room."""
        return self.ahead.skipped

    def state_dict(self):
        return dict(self._state) if self._state is not None else self.batches.state_dict()

    def step(self, ahead=True):
        """One training step; returns its loss. ``ahead``: prepare the next batch during it."""
        self._wait()
        batch, state = self._take()
        after_forward, after_gradients = self.ahead.start(self._take_ahead) if ahead else (None, None)
        loss = self.trainer.train_step(batch, after_forward=after_forward, after_gradients=after_gradients)
        self._state = state
        return loss

    def _take(self):
        if self._ahead is not None:
            taken, self._ahead = self._ahead, None
            return taken
        return next(self._it), self.batches.state_dict()

    def _take_ahead(self):
        """Take the next batch now; returns its sparse features, for the preparation."""
        self._ahead = (next(self._it), self.batches.state_dict())
        return self._ahead[0].sparse

    def _wait(self):
        """Wait for the preparation in flight, raising its error here."""
        self.ahead.wait()
