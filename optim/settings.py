"""The base of this package's frozen settings (update rules, LR schedules, loss-scale settings).

Settings check themselves when they are made. Their ``state_dict()`` is the settings as plain Python values;
``load_state_dict()`` restores nothing (a frozen object has nothing to restore) but checks that a saved state
describes the same settings, so a resumed run cannot silently continue with other hyperparameters.
"""
import dataclasses
import math
import numbers

from gpuemb.autograd.checks import check, check_int
from gpuemb.autograd.plain import config_differences, plain


class Settings:
    """Mixin for frozen dataclasses: ``validate()`` on creation, settings saved and checked as a dict."""

    def __post_init__(self):
        self.validate()

    def validate(self):
        """Raise ValueError naming the setting that is out of range; nothing to check by default."""

    def check_real(self, field, low=0.0, high=math.inf, above_low=False):
        """The field is a finite real number in ``[low, high]`` (``(low, high]`` with ``above_low``)."""
        value = getattr(self, field)
        ok = (isinstance(value, numbers.Real) and math.isfinite(value) and value <= high
              and (value > low if above_low else value >= low))
        span = ("> " if above_low else ">= ") + f"{low}" + ("" if high == math.inf else f" and <= {high}")
        check(ok, type(self).__name__, f"{field}={value!r}; use a finite number {span}")

    def check_int(self, field, low):
        """The field is an integer ``>= low``."""
        check_int(type(self).__name__, field, getattr(self, field), low)

    def state_dict(self):
        """``{"type": class name, <field>: value, ...}`` in plain Python values."""
        fields = {f.name: plain(getattr(self, f.name), type(self).__name__) for f in dataclasses.fields(self)}
        return {"type": type(self).__name__, **fields}

    def load_state_dict(self, state):
        """Check that ``state`` was saved from equal settings; raise ValueError listing every difference."""
        mine = self.state_dict()
        differ = [f"{k}: saved {saved!r}, " + (f"here {here!r}" if k in mine else "unknown here")
                  for k, saved, here in config_differences(state, mine, where=type(self).__name__)]
        check(not differ, type(self).__name__,
              "the saved state has other settings (" + "; ".join(differ) + "). Build this object with the "
              "saved settings to resume, or leave this entry out of the state to keep the new ones")
