"""Learning-rate schedules: pure maps from a step to a learning rate.

``schedule(step)`` is the learning rate of the update taken after ``step`` earlier optimizer steps (0 for the
first update). A schedule holds no counter: the optimizer owns the step count and saves it, so a schedule's
``state_dict()`` is its settings and ``load_state_dict()`` checks them (see :mod:`gpuemb.optim.config`).
"""
import math
from dataclasses import dataclass

from .config import Settings, check


class Schedule(Settings):
    """Base of the schedules: frozen settings plus ``__call__(step) -> lr``."""

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
class ConstantLR(Schedule):
    """The same ``lr`` at every step."""

    lr: float

    def validate(self):
        self.check_real("lr")

    def __call__(self, step):
        return self.lr


@dataclass(frozen=True)
class WarmupPolyDecayLR(WarmupSchedule):
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
class CosineLR(WarmupSchedule):
    """Optional linear warmup, then a half cosine from ``base_lr`` down to ``min_lr`` at ``total_steps``."""

    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    min_lr: float = 0.0
    warmup_start_factor: float = 0.0

    def validate(self):
        super().validate()
        self.check_int("total_steps", self.warmup_steps + 1)
        self.check_real("min_lr", 0.0, self.base_lr)

    def after_warmup(self, step):
        done = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * done))


@dataclass(frozen=True)
class StepLR(Schedule):
    """``base_lr`` multiplied by ``gamma`` every ``step_size`` steps."""

    base_lr: float
    step_size: int
    gamma: float = 0.1

    def validate(self):
        self.check_int("step_size", 1)
        self.check_real("base_lr")
        self.check_real("gamma", above_low=True)

    def __call__(self, step):
        return self.base_lr * self.gamma ** (step // self.step_size)


SCHEDULES = {cls.__name__: cls for cls in (ConstantLR, WarmupPolyDecayLR, CosineLR, StepLR)}


def schedule_from_state(state):
    """Rebuild a schedule from its ``state_dict()``: to resume with the saved schedule."""
    kind = state.get("type")
    check(kind in SCHEDULES, "schedule_from_state", f"unknown schedule type {kind!r}; known: {', '.join(SCHEDULES)}")
    return SCHEDULES[kind](**{k: v for k, v in state.items() if k != "type"})
