"""The loss scaler for reduced-precision training: dynamic (the default) or static.

Small gradients underflow in float16. Scaling the loss by ``S`` scales every gradient by ``S``; the scaler
divides them back before the optimizer sees them, and skips the step when any came out inf or NaN. One iteration::

    scaler.scale(loss).backward()
    stepped = scaler.step(optimizer)   # unscale in place, check, step or skip
    scaler.update()                    # back off after an overflow, grow after growth_interval clean ones

Gradients that no optimizer holds (an embedding table's held row gradients) are unscaled and checked with
``unscale_arrays_`` before ``step``; a non-finite one among them makes ``step`` skip too, so a step is taken
whole or not at all.

A static scaler is a dynamic one with growth and backoff factors of 1: ``LossScaler.static(1024.0)``. It still
skips a step with non-finite gradients, and warns, since its scale cannot change to stop that.
"""
import math
import warnings
from dataclasses import dataclass

from gpuemb.autograd import Tensor, backend
from gpuemb.autograd.backend import get_array_module

from .settings import Settings


@dataclass(frozen=True)
class LossScaleSettings(Settings):
    """How the scale starts and moves."""

    init_scale: float = 2.0 ** 16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def validate(self):
        self.check_real("init_scale", above_low=True)
        self.check_real("growth_factor", 1.0)
        self.check_real("backoff_factor", 0.0, 1.0, above_low=True)
        self.check_int("growth_interval", 1)


class LossScaler:
    """Scales the loss, unscales and checks gradients, and moves the scale; see the module docstring."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.settings = LossScaleSettings(init_scale, growth_factor, backoff_factor, growth_interval)
        self.loss_scale = float(init_scale)
        self.growth_tracker = 0  # clean iterations since the scale last changed
        self.steps_skipped = 0
        self._found_inf, self._checked = False, False
        self._unscaled, self._stepped = {}, set()  # by id(optimizer), this iteration

    @classmethod
    def static(cls, scale):
        """A scaler whose scale never changes."""
        return cls(scale, growth_factor=1.0, backoff_factor=1.0)

    @property
    def dynamic(self):
        return self.settings.growth_factor != 1.0 or self.settings.backoff_factor != 1.0

    def scale(self, loss):
        """``loss × scale`` through autograd, so ``backward()`` yields scaled gradients.

        Keep the loss itself in float32: a float16 loss above 1 times the default 2**16 is already inf.
        """
        if not isinstance(loss, Tensor):
            raise TypeError(f"LossScaler.scale: expected a Tensor, got {type(loss).__name__}")
        return loss * self.loss_scale

    def unscale_arrays_(self, grads):
        """Divide each gradient array by the scale in place, each distinct array once; True if all are finite."""
        inv, seen, flags = 1.0 / self.loss_scale, set(), {}
        for g in grads:
            if id(g) in seen:  # the same array reached twice (e.g. assigned as two grads) must not shrink twice
                continue
            seen.add(id(g))
            g *= inv
            xp = get_array_module(g)
            flags.setdefault(xp, []).append(xp.isfinite(g).all())
        # one reduction and one read per array module: a read per gradient would stall a GPU once per array
        finite = all(backend.item(xp.stack(f).all()) for xp, f in flags.items())
        self._found_inf |= not finite
        self._checked = True
        return finite

    def unscale_(self, optimizer):
        """Unscale the optimizer's gradients in place, once per iteration; True if all are finite."""
        if id(optimizer) in self._unscaled:
            raise RuntimeError("LossScaler.unscale_: this optimizer's gradients were already unscaled since the "
                               "last update(); call update() once per iteration")
        grads = [p.grad for p in optimizer.params.values() if p.grad is not None]
        self._unscaled[id(optimizer)] = self.unscale_arrays_(grads)
        return self._unscaled[id(optimizer)]

    def step(self, optimizer):
        """Unscale (unless ``unscale_`` already did), then step the optimizer if every gradient checked since the
        last ``update()`` (its own and any passed to ``unscale_arrays_``) is finite.

        Returns whether it stepped.
        """
        if id(optimizer) in self._stepped:
            raise RuntimeError("LossScaler.step: step() was already called on this optimizer since the last "
                               "update(); call update() once per iteration")
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        if not self._found_inf:
            optimizer.step()
            return True
        self.steps_skipped += 1
        if not self.dynamic:
            warnings.warn(f"LossScaler: inf or NaN gradients at the static scale {self.loss_scale}; the step was "
                          "skipped. If this repeats, use a lower scale or a dynamic scaler", RuntimeWarning)
        return False

    def update(self):
        """Move the scale after an iteration: back off if it overflowed, grow after a run of clean ones."""
        if not self._checked:
            raise RuntimeError("LossScaler.update: no gradients were checked since the last update(); "
                               "call step(optimizer) or unscale_(optimizer) first")
        s = self.settings
        if self._found_inf:
            self.loss_scale *= s.backoff_factor
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker >= s.growth_interval:
                self.growth_tracker = 0
                if math.isfinite(self.loss_scale * s.growth_factor):  # an inf scale could never back off
                    self.loss_scale *= s.growth_factor
        self._found_inf, self._checked = False, False
        self._unscaled, self._stepped = {}, set()

    def state_dict(self):
        """The settings, the current scale and the counters, as plain Python values."""
        return {"settings": self.settings.state_dict(), "scale": self.loss_scale,
                "growth_tracker": self.growth_tracker, "steps_skipped": self.steps_skipped}

    def load_state_dict(self, state):
        """Restore the scale and counters; the saved settings must match (see :mod:`gpuemb.optim.settings`)."""
        if "settings" in state:
            self.settings.load_state_dict(state["settings"])
        self.loss_scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
        self.steps_skipped = int(state["steps_skipped"])
