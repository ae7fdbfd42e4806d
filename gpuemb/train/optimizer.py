"""The dense optimizer of a run and its learning-rate schedule, from the config.

The schedule is made for the run's total step count: ``warmup_poly`` decays to the last step and ``cosine``
ends there unless ``--decay-steps`` says otherwise. The embedding rows follow the same schedule: their lr is
``--embedding-lr`` times the schedule's factor at that step (see :class:`~gpuemb.train.loop.Trainer`).
"""
from gpuemb.optim import SGD, Adagrad, Adam, AdamW, ConstantLR, CosineLR, StepLR, WarmupPolyDecayLR

from .errors import ConfigError

OPTIMIZERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam, "adamw": AdamW}


def build_schedule(config, total_steps):
    """The ``--schedule`` of ``config`` over ``total_steps`` steps, starting at ``--lr``."""
    lr, warmup, end = config.lr, config.warmup_steps or 0, config.end_lr or 0.0
    try:
        if config.schedule == "warmup_poly":
            start = warmup if config.decay_start is None else config.decay_start
            decay = config.decay_steps or max(total_steps - start, 0)
            return WarmupPolyDecayLR(lr, warmup, start, decay, end_lr=end)
        if config.schedule == "cosine":
            total = warmup + config.decay_steps if config.decay_steps else max(total_steps, warmup + 1)
            return CosineLR(lr, total, warmup, min(end, lr))
        if config.schedule == "step":
            return StepLR(lr, config.step_size, 0.1 if config.gamma is None else config.gamma)
        return ConstantLR(lr)
    except ValueError as e:
        raise ConfigError(f"--schedule {config.schedule}: {e}") from None


def build_optimizer(config, model, total_steps):
    """``--optimizer`` over the model's dense parameters, its lr following ``build_schedule``."""
    return OPTIMIZERS[config.optimizer](model.named_parameters(), lr=build_schedule(config, total_steps))
