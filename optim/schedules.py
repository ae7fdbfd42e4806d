"""Learning-rate schedules: pure maps from a step to a learning rate.

``schedule(step)`` is the learning rate of the update taken after ``step`` earlier optimizer steps (0 for the
first update). A schedule holds no counter: the optimizer owns the step count and saves it, so a schedule's
``state_dict()`` is its settings and ``load_state_dict()`` checks them (see :mod:`gpuemb.optim.settings`).

``SCHEDULES`` holds the schedules a run config may name (``class MySchedule(Schedule, name="mine")`` adds one);
each says which run settings it takes (``run_settings``) and how it is made for a run of ``total_steps``
(``for_run``), so the run config checks and builds any of them without a list of its own.
"""
import math
from dataclasses import dataclass

from gpuemb.autograd.checks import check
from gpuemb.autograd.registry import Registry

from .settings import Settings

SCHEDULES = Registry("schedule")


class Schedule(Settings):
    """Base of the schedules: frozen settings plus ``__call__(step) -> lr``."""

    run_settings = ()  # the run config's settings this schedule takes (``tools/train.py --warmup-steps`` ...)
    required_settings = ()  # those of them a run must give

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            SCHEDULES.add(name, cls)

    @classmethod
    def for_run(cls, lr, total_steps, **settings):
        """The schedule of a run of ``total_steps`` at peak ``lr``, from the ``run_settings`` it was given (None:
        the schedule's default for such a run)."""
        raise NotImplementedError(f"{cls.__name__} has no for_run")

    def __call__(self, step):
        raise NotImplementedError(f"{type(self).__name__} has no __call__")


class WarmupSchedule(Schedule):
    """Linear warmup from ``warmup_start_factor·base_lr`` at step 0 to ``base_lr`` at ``warmup_steps``, then
    ``after_warmup(step)``. Subclasses declare the fields ``base_lr``, ``warmup_steps``, ``warmup_start_factor``."""

    def validate(self):
        self.check_real("base_lr")
        self.check_int("warmup_steps", 0)
        self.check_real("warmup_start_factor", 0.0, 1.0)

    def __call__(self, step):
        if step < self.warmup_steps:
            f = self.warmup_start_factor
            return self.base_lr * (f + (1.0 - f) * step / self.warmup_steps)
        return self.after_warmup(step)

    def after_warmup(self, step):
        raise NotImplementedError(f"{type(self).__name__} has no after_warmup")


@dataclass(frozen=True)
class ConstantLR(Schedule, name="constant"):
    """The same ``lr`` at every step."""

    lr: float

    @classmethod
    def for_run(cls, lr, total_steps):
        return cls(lr)

    def validate(self):
        self.check_real("lr")

    def __call__(self, step):
        return self.lr


@dataclass(frozen=True)
class WarmupPolyDecayLR(WarmupSchedule, name="warmup_poly"):
    """The DLRM MLPerf schedule: linear warmup to ``base_lr``, hold until ``decay_start``, then polynomial decay.

    The decay is ``end_lr + (base_lr - end_lr)·(1 - (step - decay_start)/decay_steps)**power``; it reaches
    ``end_lr`` at ``decay_start + decay_steps`` and stays there. ``decay_steps=0`` means no decay.
    """

    base_lr: float
    warmup_steps: int
    decay_start: int
    decay_steps: int
    power: float = 2.0
    end_lr: float = 0.0
    warmup_start_factor: float = 0.0
    run_settings = ("warmup_steps", "decay_start", "decay_steps", "end_lr")

    @classmethod
    def for_run(cls, lr, total_steps, warmup_steps=None, decay_start=None, decay_steps=None, end_lr=None):
        """Warmup (default none), then the decay from the end of warmup (or ``decay_start``) to the last step."""
        warmup = warmup_steps or 0
        start = warmup if decay_start is None else decay_start
        return cls(lr, warmup, start, decay_steps or max(total_steps - start, 0), end_lr=end_lr or 0.0)

    def validate(self):
        super().validate()
        self.check_int("decay_start", 0)
        self.check_int("decay_steps", 0)
        self.check_real("end_lr")
        self.check_real("power", above_low=True)
        check(self.decay_start >= self.warmup_steps, type(self).__name__, f"decay_start={self.decay_start} "
              f"comes before the end of warmup ({self.warmup_steps}); start the decay at or after it")

    def after_warmup(self, step):
        if step < self.decay_start or self.decay_steps == 0:
            return self.base_lr
        left = max(0.0, 1.0 - (step - self.decay_start) / self.decay_steps)
        return self.end_lr + (self.base_lr - self.end_lr) * left ** self.power


@dataclass(frozen=True)
class CosineLR(WarmupSchedule, name="cosine"):
    """Optional linear warmup, then a half cosine from ``base_lr`` down to ``min_lr`` at ``total_steps``."""

    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    min_lr: float = 0.0
    warmup_start_factor: float = 0.0
    run_settings = ("warmup_steps", "decay_steps", "end_lr")

    @classmethod
    def for_run(cls, lr, total_steps, warmup_steps=None, decay_steps=None, end_lr=None):
        """Warmup (default none), then the half cosine to ``end_lr`` over ``decay_steps`` (default: to the last
        step)."""
        warmup = warmup_steps or 0
        total = warmup + decay_steps if decay_steps else max(total_steps, warmup + 1)
        return cls(lr, total, warmup, min(end_lr or 0.0, lr))

    def validate(self):
        super().validate()
        self.check_int("total_steps", self.warmup_steps + 1)
        self.check_real("min_lr", 0.0, self.base_lr)

    def after_warmup(self, step):
        done = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * done))


@dataclass(frozen=True)
class StepLR(Schedule, name="step"):
    """``base_lr`` multiplied by ``gamma`` every ``step_size`` steps."""

    base_lr: float
    step_size: int
    gamma: float = 0.1
    run_settings = ("step_size", "gamma")
    required_settings = ("step_size",)

    @classmethod
    def for_run(cls, lr, total_steps, step_size=None, gamma=None):
        return cls(lr, step_size, 0.1 if gamma is None else gamma)

    def validate(self):
        self.check_int("step_size", 1)
        self.check_real("base_lr")
        self.check_real("gamma", above_low=True)

    def __call__(self, step):
        return self.base_lr * self.gamma ** (step // self.step_size)


def schedule_from_state(state):
    """Rebuild a schedule from its ``state_dict()``: to resume with the saved schedule."""
    kind = state.get("type")
    by_type = {cls.__name__: cls for cls in SCHEDULES.values()}
    check(kind in by_type, "schedule_from_state", f"unknown schedule type {kind!r}; known: {', '.join(by_type)}")
    return by_type[kind](**{k: v for k, v in state.items() if k != "type"})
