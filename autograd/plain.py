"""Plain values: settings and configs as JSON gives them back, and the fields where two of them differ.

Every saved config (a snapshot's table config, a checkpoint's run config, an optimizer's settings) is compared
with the live one this way, so ``(0.9, 0.999)`` equals the ``[0.9, 0.999]`` a file gave back and a NumPy scalar
equals its number.
"""
import json

import numpy as np


def plain(value, where="value"):
    """``value`` as JSON gives it back: NumPy scalars as Python numbers, tuples as lists; a ValueError names
    ``where`` if it holds anything else than numbers, strings, lists and dicts."""
    try:
        return json.loads(json.dumps(value, default=_number))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: cannot be written as JSON ({e}); use numbers, strings, lists and dicts") from None


def _number(v):
    if isinstance(v, np.generic):  # e.g. a float32 setting: JSON takes it as the Python number
        return v.item()
    raise TypeError(f"{type(v).__name__} {v!r} is not JSON")


def config_differences(saved, live, ignore=(), where="config"):
    """``[(field, saved value, live value)]`` of the fields where two nested config dicts differ, compared as JSON
    gives them back and named by their dotted path (``"rule.betas"``); a field one lacks is None there.
    ``ignore``: fields, or whole groups by their prefix (``"options"``), left out. ``where`` names ``live`` in
    the error if it is not JSON."""
    a, b = _fields(plain(saved, where)), _fields(plain(live, where))
    kept = [f for f in sorted(a.keys() | b.keys()) if not any(f == i or f.startswith(i + ".") for i in ignore)]
    return [(f, a.get(f), b.get(f)) for f in kept if a.get(f) != b.get(f)]


def _fields(d, prefix=""):
    """``{"options.cache_rows": value, ...}``: a nested dict flattened to dotted field names."""
    out = {}
    for k, v in d.items():
        out.update(_fields(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out
