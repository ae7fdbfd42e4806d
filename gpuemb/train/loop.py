"""The training step and the stream of batches it eats, with everything a resume needs of both.

A step is: forward, ``bce_with_logits`` against the labels (``[B]``, or ``[B, T]`` for T tasks), a check that
the loss is finite, backward (which updates the touched embedding rows in place, with the table's rule), then
the dense optimizer's step. The loss is checked *before* the backward, so a NaN never reaches the weights.

All randomness of a run is counter-based, so its state is a handful of counters saved with the rest: dropout
masks come from (seed, the MLP's step), which is module extra state; the shuffle from (seed, epoch, window) and
the loader's position; new embedding rows from (seed, key); synthetic rows from (seed, split, row).
"""
import math

from gpuemb.autograd import bce_with_logits
from gpuemb.autograd.backend import get_array_module

from .errors import ConfigError, DivergedError, TrainError


class Trainer:
    """Steps ``model`` on batches: dense parameters by ``optimizer``, embedding rows by their tables.

    ``tables``: ``{name: EmbeddingTable}``. Their lr follows the optimizer's schedule: at each step it is
    ``embedding_lr × lr / base_lr``, with ``lr`` the schedule's dense lr at that step and ``base_lr`` its peak.
    """

    def __init__(self, model, optimizer, tables, base_lr, embedding_lr):
        self.model, self.optimizer, self.tables = model, optimizer, tables
        self.base_lr, self.embedding_lr = base_lr, embedding_lr
        self.step, self.samples = 0, 0  # steps taken and samples trained on, in all (resumes included)

    @property
    def lrs(self):
        """(dense lr, embedding lr) of the next step."""
        lr = self.optimizer.lr
        return lr, self.embedding_lr * lr / self.base_lr

    def train_step(self, batch):
        """One step on ``batch`` (label, dense, sparse arrays); returns the loss as a float."""
        lr, embedding_lr = self.lrs
        for table in self.tables.values():
            table.lr = embedding_lr
        self.model.train()
        logits = self.model(batch.dense, batch.sparse)
        labels = batch.label
        if tuple(labels.shape) != logits.shape:
            raise TrainError(f"step {self.step + 1}: the model gives logits of shape {logits.shape} and the "
                             f"labels have shape {tuple(labels.shape)}; a model of {labels.shape[1:] or 1} tasks "
                             "fits this data")
        loss = bce_with_logits(logits, get_array_module(logits.data).asarray(labels, logits.dtype))
        value = float(loss.item())
        if not math.isfinite(value):
            raise DivergedError(f"the loss became {value} at step {self.step + 1} (lr {lr:g}, embedding lr "
                                f"{embedding_lr:g})")
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.step += 1
        self.samples += batch.rows
        bad = non_finite(self.model)
        if bad:  # a dead ReLU net can keep the loss finite for a while; the weights tell at once
            raise DivergedError(f"after step {self.step} the dense parameter {bad} holds NaN or inf (lr {lr:g}, "
                                f"embedding lr {embedding_lr:g})")
        return value

    def state_dict(self):
        """The dense model, its extra state (the dropout counters), the optimizer and the counters."""
        return {"model": self.model.state_dict(), "module_state": self.model.extra_states(),
                "optimizer": self.optimizer.state_dict(), "step": self.step, "samples": self.samples}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.load_extra_states(state["module_state"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.samples = int(state["step"]), int(state["samples"])


def non_finite(model):
    """The name of the first dense parameter of ``model`` holding NaN or inf, or None.

    One reduction per parameter on the device and a single host sync per step: a ``bool()`` per parameter would
    stall a GPU once per layer."""
    params = list(model.named_parameters())
    if not params:
        return None
    xp = get_array_module(params[0][1].data)
    finite = xp.stack([xp.isfinite(p.data).all() for _, p in params])
    if bool(finite.all()):
        return None
    return params[int(xp.argmin(finite))][0]  # argmin of booleans: the first False


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
