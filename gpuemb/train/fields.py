"""The fields of the run config's sections: each a dataclass field with its help, key, flag, choices and range.

A section of the run config (``sections.py``) is a frozen dataclass of ``setting`` fields. Each setting has a key,
which is how a TOML or JSON file and ``TrainConfig.of`` name it (its field name unless said otherwise), and a flag
made from the key (``batch_size`` -> ``--batch-size``). ``choices`` may be a registry (``gpuemb.optim.RULES``):
it is read when a value is checked or a parser is made, so a class registered later is a valid choice.
"""
import dataclasses
import math
import numbers

from .errors import ConfigError

KINDS = {"int": "an integer", "float": "a finite number", "str": "a non-empty string", "bool": "true or false",
         "dict": "a table of KEY = VALUE", "list": "a non-empty list of names"}


def setting(default, help, kind=None, choices=None, low=None, high=None, key=None, flag=None, resumable=False,
            bare=None, before=None):
    """A field of a section: its default, help text and the checks of its value.

    kind: int, float, str, bool, dict, list or choice (the default's type, or choice with ``choices``); key: the
    name in files and flat dicts, when not the field's; flag: the command-line flag, when not ``--<key>``;
    resumable: whether a resume may change it (how long a run is, what it writes, where rows live), not what it
    computes; bare: the value of the flag given alone (``--resume``), and of ``true`` in a file; before: what a
    checkpoint saved before the setting existed ran as, where that is not its default (a new default that computes
    otherwise: a resume of such a checkpoint then says which value to pass, rather than go on computing otherwise)."""
    kind = kind or ("choice" if choices is not None else type(default).__name__)
    meta = {"help": help, "kind": kind, "choices": choices, "low": low, "high": high, "key": key, "flag": flag,
            "resumable": resumable, "bare": bare, "before": before}
    if kind == "dict":
        return dataclasses.field(default_factory=dict, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def key_of(f):
    return f.metadata["key"] or f.name


def flag_of(f):
    return f.metadata["flag"] or "--" + key_of(f).replace("_", "-")


def default_of(f):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def choices_of(f):
    return tuple(f.metadata["choices"] or ())


def check_value(f, value):
    """ConfigError naming the flag unless ``value`` fits the setting ``f``; None is "chosen for you" where the
    default is None."""
    m, where = f.metadata, flag_of(f)
    if value is None:
        if default_of(f) is None:
            return
        raise ConfigError(f"{where}: needs a value; leave the key out for its default")
    kind = m["kind"]
    ok = {"int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v),
          "str": lambda v: isinstance(v, str) and v != "", "choice": lambda v: v in choices_of(f),
          "bool": lambda v: isinstance(v, bool), "dict": lambda v: isinstance(v, dict) and all(map(_is_str, v)),
          "list": lambda v: isinstance(v, list) and v != [] and all(isinstance(x, str) and x for x in v)}[kind]
    if not ok(value):
        want = "one of " + ", ".join(choices_of(f)) if kind == "choice" else KINDS[kind]
        raise ConfigError(f"{where}: {value!r} is not {want}")
    if m["low"] is not None and value < m["low"]:
        raise ConfigError(f"{where}: {value!r} is below {m['low']}; use a value >= {m['low']}")
    if m["high"] is not None and value > m["high"]:
        raise ConfigError(f"{where}: {value!r} is above {m['high']}; use a value <= {m['high']}")


def _is_str(v):
    return isinstance(v, str)


class Section:
    """Base of the run config's sections: every setting checked when made, then the section's own combinations."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check_value(f, getattr(self, f.name))
        self.check()

    def check(self):
        """ConfigError naming the first flag of a combination that cannot work; nothing by default."""

    def given(self, *names):
        """Those of the fields ``names`` that were given (not None or empty)."""
        return [n for n in names if getattr(self, n) not in (None, [], {})]

    def fail(self, name, message):
        raise ConfigError(f"{flag_of(self.field(name))}: {message}")

    @classmethod
    def field(cls, name):
        return next(f for f in dataclasses.fields(cls) if f.name == name)
