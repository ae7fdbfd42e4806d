"""Value checks that settings and layers in every package share, so a bad value is reported the same way anywhere.

An error is ``ValueError("<owner>: <message>")``: the owner names the class or function given the value, the
message says what was wrong and what to use instead. This is the lowest layer, so ``gpuemb.optim``,
``gpuemb.io`` and ``gpuemb`` may all import it.
"""
import numbers


class SettingError(ValueError):
    """A bad value: ``ValueError("<owner>: <message>")`` that also says which setting (``name``) was at fault, so a
    caller that knows the setting by another name (a command-line flag) can say it in its own terms."""

    def __init__(self, owner, message, name=None):
        super().__init__(f"{owner}: {message}")
        self.owner, self.message, self.name = owner, message, name


def fail(owner, message, name=None):
    """Raise ``ValueError("<owner>: <message>")`` (a SettingError naming the setting ``name``)."""
    raise SettingError(owner, message, name)


def check(ok, owner, message):
    """Raise ``ValueError("<owner>: <message>")`` unless ``ok``."""
    if not ok:
        fail(owner, message)


def is_int(value, low=None):
    """Whether ``value`` is an integer, Python's or NumPy's but not a bool, and ``>= low`` where ``low`` is given."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and (low is None or value >= low)


def check_int(owner, name, value, low, allow_none=False, note=""):
    """Raise unless ``value`` is an int (not a bool) ``>= low``, or None with ``allow_none``; the message reads
    ``<name>=<value>; use an int >= <low>`` (`` or None``) followed by ``note``."""
    if not (is_int(value, low) or (allow_none and value is None)):
        fail(owner, f"{name}={value!r}; use an int >= {low}" + (" or None" if allow_none else "") + note, name)
