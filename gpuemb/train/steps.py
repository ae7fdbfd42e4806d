"""The kinds of training step: what a step does between taking its batch and returning its loss. A run's kind is
chosen once, when the run is built (``strategy.py``), and ``Trainer.train_step`` calls it; no step asks again.

- ``WholeStep``: the forward on the rank's part, the loss, the backward (which updates the touched rows in place
  and, on an overlapped communicator, starts the dense buckets and the gradients' all-to-all), the dense
  gradients' allreduce, then the dense optimizer's step.
- ``ScaledStep`` (``--precision fp16``): the same forward and loss, then ``optimizer.scaled_step`` in place of the
  backward and step, which skips the whole step, rows and all, where a gradient overflowed; on an overlapped
  communicator its backward starts the dense buckets too.
- ``SlicedStep`` (``--deterministic N``): the lookups once, the head slice by slice, the lookups' backward once on
  the slices' gradients, the dense gradients added in slice order (``slices.py``).

Each calls the step's two hooks, ``after_forward`` and ``after_gradients`` (the pipeline's, ``ahead.py``), at
its own point; the loss is checked before any update, so a NaN never reaches the weights.
"""
from gpuemb.autograd import backend, bce_with_logits, launches
from gpuemb.autograd.backend import get_array_module

from .loop import finite_flag
from .optimizer import scaled_step


class Step:
    """What every kind of step has: the state a checkpoint keeps of it, none but fp16's scaler."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class WholeStep(Step):
    """The step of a plain run, fp32, bf16 or tf32: the whole part at once, the rows updated in the backward.

    On an overlapped communicator the loss's mean over the ranks travels during the backward and is checked right
    after it: the backward updates nothing there (the rows wait for ``settle()``, the dense parameters for the
    optimizer), so a NaN still reaches no weight, and every rank raises at the same point, before the next
    collective the check guards. Waited for before the backward, the mean was each step's first exposed wait:
    the ranks' skew, on 2 shared cores, up to 10 ms of it (docs/perf/README.md, "What stays exposed at W=4")."""

    def __call__(self, trainer, batch, after_forward, after_gradients):
        logits = trainer.model(batch.dense, batch.sparse)
        _after(after_forward)
        xp = get_array_module(logits.data)
        labels = trainer.labels(logits, batch.label)
        with launches.phase("loss"):
            loss = bce_with_logits(logits, labels)
            # The step's one read from the device: the loss, and whether the last step left the dense parameters
            # finite (checked here rather than after that step's update, so a step waits for the device only once).
            local, finite = backend.to_host(xp.stack([loss.data.astype(xp.float32),
                                                      finite_flag(trainer.model, xp, trainer.optimizer)]))
            mean = trainer.cluster.start_mean(float(local))  # the global batch's: every rank agrees if it is finite
            late = trainer.cluster.overlapped

            def check():
                trainer.check(mean(), finite)
            if not late:
                check()
        trainer.optimizer.zero_grad()
        self.update(trainer, loss, after_gradients, check if late else None)
        return mean()

    def update(self, trainer, loss, after_gradients, check=None):
        """The backward, ``check()`` of the loss where it comes after it, the dense gradients' allreduce and the
        dense step."""
        cluster = trainer.cluster
        loss.backward(on_ready=cluster.grad_ready)  # an overlapped allreduce starts its buckets in it
        self.after_backward(check, after_gradients)
        with launches.phase("communication"):
            cluster.allreduce()
        with launches.phase("dense_optimizer"):
            trainer.optimizer.step()

    @staticmethod
    def after_backward(check, after_gradients):
        """The loss's ``check()`` where it comes after the backward, then the step's hook: once the backward has
        started its collectives, so that what the hook starts (the next batch's keys) queues behind them."""
        if check is not None:
            with launches.phase("loss"):
                check()
        _after(after_gradients)


class ScaledStep(WholeStep):
    """``--precision fp16``'s step: the loss scaled by ``scaler`` (a ``LossScaler``), the step skipped where a
    gradient overflowed. The scaler's state goes into the trainer's checkpoint state as ``"scaler"``.

    On an overlapped communicator it overlaps as the plain step does: the backward starts the dense buckets, and
    the loss's mean travels during it and is checked right after it. That is as safe here: the tables hold every
    row update until the scaler's decision, the dense parameters wait for its step, so a NaN reaches no weight,
    and every rank raises at the same step, on the same mean."""

    def __init__(self, scaler):
        self.scaler = scaler

    def update(self, trainer, loss, after_gradients, check=None):
        scaled_step(loss, trainer.optimizer, trainer.tables, self.scaler, trainer.cluster,
                    lambda: self.after_backward(check, after_gradients))

    def state_dict(self):
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state):
        self.scaler.load_state_dict(state["scaler"])


class SlicedStep(Step):
    """``--deterministic``'s step over ``slices`` (a ``slices.Slices``): nothing is updated before the loss is
    checked; the dense gradients wait in the slices, the rows for their lookups' backward."""

    def __init__(self, slices):
        self.slices = slices

    def __call__(self, trainer, batch, after_forward, after_gradients):
        slices, model, optimizer = self.slices, trainer.model, trainer.optimizer
        embedded = model.embed(batch.sparse)
        _after(after_forward)
        optimizer.zero_grad()
        sums, gys = slices.backward(model, batch, embedded, trainer.labels)
        xp = get_array_module(sums)
        with launches.phase("loss"):
            value = slices.loss(sums)
            trainer.check(value, backend.to_host(finite_flag(model, xp, optimizer)))
        for e, gy in zip(embedded, gys):
            e.backward(gy)
        _after(after_gradients)  # behind the slices' gathers, started in the last slice (overlapped)
        with launches.phase("communication"):
            trainer.cluster.allreduce()
        with launches.phase("dense_optimizer"):
            optimizer.step()
        return value


def _after(hook):
    """Call a step's hook, if any: the pipeline's start of the next batch's prefetch, or of its key exchange."""
    if hook is not None:
        with launches.phase("prefetch"):
            hook()
