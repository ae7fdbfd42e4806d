"""What ``predict`` takes of the sparse features: per feature, one bag of keys per sample, read from any of the
forms below and checked against the features the bundle's model was trained on (its manifest's ``features``:
each one's name and hotness, the keys every row holds, or "jagged", bags of any length).

- a matrix ``[B, C]``: each feature's keys in its own run of columns, as many as its hotness (a jagged feature
  takes one column, a bag of one key); a single-hot model's ``[B, F]``, a multi-hot one's ``[B, sum(hotness)]``;
- ``JaggedFeatures`` (``gpuemb.io.jagged``, read by its fields, so this runtime need not import it): its names
  must be the bundle's, in order; its weights weigh a sum;
- a dict ``{name: bags}`` with every feature's name, where bags is a list of B lists of keys, an int array
  ``[B]`` (one key each) or ``[B, k]``, or ``(values [N], lengths [B])`` or ``(values, lengths, weights [N])``.

A fixed-hotness feature's bags must each hold its hotness of keys: the model never saw another count. Whatever
does not fit is one BundleError line naming the feature and what differs.
"""
from typing import NamedTuple

import numpy as np

from gpuemb.key_types import KeyTypeError, integer_keys

from .errors import BundleError

JAGGED = "jagged"


class KeyTypeBundleError(BundleError, KeyTypeError):
    """Keys given to ``predict`` that are not integers: a BundleError, as every bad request is, and the store's
    KeyTypeError, with its message."""


class Bags(NamedTuple):
    """One feature's bags: ``keys [N]`` int64, ``offsets [B+1]`` (None: one key per sample), ``weights [N]``."""
    keys: np.ndarray
    offsets: np.ndarray = None
    weights: np.ndarray = None


def columns(features):
    """The columns each feature takes in the matrix form: its hotness, or 1 for a jagged feature."""
    return [1 if f["hotness"] == JAGGED else f["hotness"] for f in features]


def read_bags(sparse, features):
    """``(B, [Bags per feature])`` of the request ``sparse`` (one of the forms above) for ``features``."""
    if isinstance(sparse, dict):
        got = _from_dict(sparse, features)
    elif all(hasattr(sparse, a) for a in ("names", "values", "offsets", "batch_size")):
        got = _from_jagged(sparse, features)
    else:
        got = _from_matrix(sparse, features)
    B = {_size(b) for b in got}
    if len(B) > 1:
        sizes = ", ".join(f"{f['name']}: {_size(b)}" for f, b in zip(features, got))
        raise BundleError(f"predict: the sparse features hold bags of different batch sizes ({sizes}); give every "
                          "feature one bag per sample")
    for f, b in zip(features, got):
        _check_hotness(f, b)
    return B.pop(), got


def _size(b):
    return b.keys.size if b.offsets is None else b.offsets.size - 1


def _keys(x, name):
    return integer_keys(x, f"predict: sparse feature {name!r}", KeyTypeBundleError).astype(np.int64).reshape(-1)


def _from_matrix(sparse, features):
    width = columns(features)
    C = sum(width)
    want = f"[B, F] with F = {C}, one key per sparse feature" if C == len(width) else \
        f"[B, sum(hotness)] = [B, {C}], each feature's keys in its own columns ({_hotness(features)})"
    try:
        sparse = np.asarray(sparse)
    except (ValueError, TypeError):
        raise BundleError(f"predict: sparse is a {type(sparse).__name__} whose rows do not stack into one array "
                          f"(rows of different lengths?); give one array {want}, or a dict of bags per feature "
                          "(docs/serve.md)") from None
    sparse = integer_keys(sparse, "predict: sparse", KeyTypeBundleError)
    if sparse.ndim != 2 or sparse.shape[1] != C:
        raise BundleError(f"predict: sparse is {sparse.dtype} of shape {sparse.shape}; want integer keys {want}")
    starts = np.cumsum([0] + width)
    return [_fixed(sparse[:, a:a + k].astype(np.int64), k) for a, k in zip(starts, width)]


def _fixed(keys, k):
    """The bags of ``keys [B, k]``, k keys each."""
    B = keys.shape[0]
    return Bags(np.ascontiguousarray(keys).reshape(-1), None if k == 1 else np.arange(0, B * k + 1, k))


def _from_jagged(jagged, features):
    names = tuple(jagged.names)
    _check_names(names, features, "JaggedFeatures' names")
    try:
        values, offsets = np.asarray(jagged.values), np.asarray(jagged.offsets, np.int64).reshape(-1)
        weights = None if jagged.weights is None else np.asarray(jagged.weights, np.float32).reshape(-1)
    except (TypeError, ValueError) as e:  # a device array: the runtime reads host arrays
        raise BundleError(f"predict: JaggedFeatures' arrays cannot be read as NumPy arrays ({e}); give them on the "
                          "host") from None
    B, F = int(jagged.batch_size), len(names)
    if offsets.size != F * B + 1:
        raise BundleError(f"predict: JaggedFeatures has {offsets.size} offsets for {F} features of {B} samples; "
                          "want F·B + 1")
    values = _keys(values, names[0]) if values.size else np.zeros(0, np.int64)
    out = []
    for f in range(F):
        bounds = offsets[f * B:(f + 1) * B + 1]
        a, b = int(bounds[0]), int(bounds[-1])
        out.append(_bag(names[f], values[a:b], bounds - a, None if weights is None else weights[a:b]))
    return out


def _from_dict(sparse, features):
    _check_names(tuple(sparse), features, "the dict's keys", ordered=False)
    return [_dict_bags(f["name"], sparse[f["name"]]) for f in features]


def _dict_bags(name, x):
    if isinstance(x, tuple):
        if len(x) not in (2, 3):
            raise BundleError(f"predict: sparse feature {name!r} is a tuple of {len(x)}; give (values, lengths) or "
                              "(values, lengths, weights)")
        lengths = np.asarray(x[1]).reshape(-1)
        if lengths.dtype.kind not in "iu" and lengths.size:
            raise BundleError(f"predict: sparse feature {name!r} has lengths of {lengths.dtype}; give ints, the "
                              "keys in each sample's bag")
        if (lengths < 0).any():
            raise BundleError(f"predict: sparse feature {name!r} has a negative length at row "
                              f"{int(np.argmax(lengths < 0))}; give the keys in each sample's bag")
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        weights = None if len(x) == 2 else np.asarray(x[2], np.float32).reshape(-1)
        return _bag(name, np.asarray(x[0]), offsets, weights)
    try:
        matrix = np.asarray(x)
    except (ValueError, TypeError):
        matrix = None  # bags of different lengths
    if matrix is not None and matrix.ndim in (1, 2) and matrix.dtype != object and (matrix.size or matrix.ndim == 2):
        keys = _keys(matrix, name)
        return Bags(keys) if matrix.ndim == 1 else _fixed(keys.reshape(matrix.shape), matrix.shape[1])
    bags = [np.asarray(b).reshape(-1) for b in x]
    offsets = np.concatenate([[0], np.cumsum([b.size for b in bags], dtype=np.int64)])
    full = [b for b in bags if b.size]  # an empty list reads as float64: it holds no key to refuse
    return _bag(name, np.concatenate(full) if full else np.zeros(0, np.int64), offsets, None)


def _bag(name, values, offsets, weights):
    """Checked ``Bags`` of feature ``name``."""
    keys = _keys(values, name) if values.size else np.zeros(0, np.int64)
    if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != keys.size:
        raise BundleError(f"predict: sparse feature {name!r}: its bags' offsets do not run from 0 up to its "
                          f"{keys.size} keys; give each sample's keys once, in order")
    if weights is not None and weights.shape != keys.shape:
        raise BundleError(f"predict: sparse feature {name!r} has {weights.size} weights for {keys.size} keys; give "
                          "one weight per key")
    return Bags(keys, offsets, weights)


def _check_names(names, features, what, ordered=True):
    want = tuple(f["name"] for f in features)
    if (names if ordered else set(names)) == (want if ordered else set(want)):
        return
    missing, extra = [n for n in want if n not in names], [n for n in names if n not in want]
    differs = (f"lacks {', '.join(map(repr, missing))}" if missing else "") + ("; " if missing and extra else "") + \
        (f"has {', '.join(map(repr, extra))}, which the bundle does not" if extra else "")
    raise BundleError(f"predict: {what} do not match the bundle's features: {differs or 'another order'}; the "
                      f"bundle's are {', '.join(want)}")


def _check_hotness(feature, bags):
    k = feature["hotness"]
    if k == JAGGED:
        return
    sizes = np.ones(_size(bags), np.int64) if bags.offsets is None else np.diff(bags.offsets)
    bad = np.flatnonzero(sizes != k)
    if bad.size:
        raise BundleError(f"predict: sparse feature {feature['name']!r} has {int(sizes[bad[0]])} keys in row "
                          f"{int(bad[0])}, but the bundle's model was trained on {k} in every row (hotness {k}); "
                          "give that many")


def _hotness(features):
    return ", ".join(f"{f['name']} {f['hotness']}" for f in features)
