"""The dense optimizer of a run and its learning-rate schedule, from the config.

The schedule is made for the run's total step count: ``warmup_poly`` decays to the last step and ``cosine``
ends there unless ``--decay-steps`` says otherwise. The embedding rows follow the same schedule: their lr is
``--embedding-lr`` times the schedule's factor at that step (see :class:`~gpuemb.train.loop.Trainer`).

``--precision fp16`` adds a dynamic loss scaler, and ``scaled_step`` then takes the place of backward and step
(``steps.ScaledStep``, chosen when the run is built: ``strategy.py``).
"""
import numpy as np

from gpuemb.autograd import launches
from gpuemb.optim import OPTIMIZERS, SCHEDULES

from .errors import ConfigError


def build_schedule(config, total_steps):
    """The ``--schedule`` of ``config`` over ``total_steps`` steps, starting at ``--lr``."""
    o = config.optimization
    try:
        return SCHEDULES[o.schedule].for_run(o.lr, total_steps, **o.schedule_settings())
    except ValueError as e:
        raise ConfigError(f"--schedule {o.schedule}: {e}") from None


def build_optimizer(config, model, total_steps):
    """``--optimizer`` over the model's dense parameters, its lr following ``build_schedule``."""
    return OPTIMIZERS[config.optimization.optimizer](model.named_parameters(), lr=build_schedule(config, total_steps))


def scaled_step(loss, optimizer, tables, scaler, cluster, after_backward=None):
    """Backward of the scaled loss, then the dense step and the tables' row updates together; returns whether it
    stepped. Each table holds its row updates through the backward; once the scaler has unscaled and checked them
    with the dense gradients, all are applied, or, on inf or NaN, none (and the scale backs off).

    ``cluster``: the dense gradients are averaged over the ranks, and every rank skips the step when any rank's row
    gradients overflowed, so the ranks stay in step (a world of one: itself alone). On an overlapped communicator the
    backward starts the dense buckets as their gradients complete (``cluster.grad_ready``), as the plain step's
    does: the same allreduces of the same vectors, so the same bits, and the scaler still checks the reduced ones.
    ``after_backward()``, if given, runs once the backward has started its collectives and before anything is
    updated: the loss's check, and the next batch's key exchange, which would otherwise go ahead of the buckets.

    Its phases (``gpuemb.autograd.launches``): the scaling counts with the ``loss``, the allreduce as
    ``communication``, the unscaling and the dense step as ``dense_optimizer``, and the held row updates, applied
    after them, as ``embedding_backward``."""
    held = [table.hold_updates() for table in tables.values()]
    try:
        with launches.phase("loss"):
            scaled = scaler.scale(loss)
        scaled.backward(on_ready=cluster.grad_ready)
        if after_backward is not None:
            after_backward()
        cluster.settle()  # the held row updates are checked for overflow with the dense gradients
        with launches.phase("communication"):
            cluster.allreduce()
        with launches.phase("dense_optimizer"):
            finite = scaler.unscale_arrays_([batch.grads for h in held for batch in h])
            if not cluster.everywhere(finite) and finite:
                # another rank's rows overflowed; an inf checked here makes this rank skip the same step
                scaler.unscale_arrays_([np.full(1, np.inf, np.float32)])
            stepped = scaler.step(optimizer)
    except BaseException:
        for table in tables.values():
            table.release_updates(apply=False)
        raise
    with launches.phase("embedding_backward"):
        for table in tables.values():
            table.release_updates(stepped)
    scaler.update()
    return stepped
