"""The sparse part of a batch as jagged features: per feature, one bag of keys per sample.

TorchRec's KeyedJaggedTensor holds the same thing; here it is plain arrays in a frozen dataclass, so any stack
reads and writes it through DLPack (every field is a NumPy or CuPy array). The layout is feature-major, as there:
``values [N]`` are the keys of feature 0's B bags, then feature 1's, ...; ``offsets [F·B + 1]`` delimit the F·B
bags in CSR form (bag ``f·B + b`` is ``values[offsets[f·B + b]:offsets[f·B + b + 1]]``); ``weights [N]``, where
given, weigh each key in a weighted sum. An empty bag is allowed (it pools to zeros).

A batch whose bags all hold exactly one key is single-hot: ``dense()`` gives it as the ``[B, F]`` matrix that the
fast path (one gathered row per key, no pooling) takes.

Every constructor checks its input and raises a one-line ``JaggedError`` that names the feature and the row: a
negative length, offsets that do not start at 0, decrease, or do not end at the values' length, a bag longer
than a stated cap, weights that do not match the values.
"""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.backend import get_array_module, to_host
from gpuemb.key_types import integer_keys

from .bags import concat_ranges
from .errors import DataError


class JaggedError(DataError):
    """Jagged features that do not describe bags: the message names the feature and the row."""


@dataclass(frozen=True, eq=False)
class JaggedFeatures:
    """F features of B samples as bags of int64 keys; see the module docstring. Build with ``from_lengths``,
    ``from_offsets`` or ``from_dense``, which check their input."""
    names: tuple
    values: object  # [N] int64
    offsets: object  # [F·B + 1] int64
    weights: object = None  # [N] float32, or None
    batch_size: int = 0

    @property
    def n_features(self):
        return len(self.names)

    @classmethod
    def from_lengths(cls, names, values, lengths, weights=None, max_bag=None):
        """From ``lengths [F, B]`` (or ``[F·B]``, feature-major): each bag's number of keys."""
        names = _names(names)
        lengths = np.asarray(to_host(lengths), np.int64)
        F = len(names)
        if lengths.ndim == 1 and F and lengths.size % F == 0:
            lengths = lengths.reshape(F, -1)
        if lengths.ndim != 2 or lengths.shape[0] != F:
            raise JaggedError(f"lengths of shape {lengths.shape} for {F} features; give [F, B] (or [F·B], "
                              "feature-major)")
        _check_lengths(names, lengths, max_bag)
        xp = get_array_module(values)
        offsets = xp.asarray(np.concatenate([[0], np.cumsum(lengths.ravel())]))
        return cls.from_offsets(names, values, offsets, weights, max_bag)

    @classmethod
    def from_offsets(cls, names, values, offsets, weights=None, max_bag=None):
        """From CSR ``offsets [F·B + 1]`` over the feature-major bags."""
        names = _names(names)
        xp = get_array_module(values, offsets)
        values = integer_keys(xp.asarray(values), "JaggedFeatures values")  # before the cast, which would truncate
        values = xp.ascontiguousarray(values.astype(np.int64, copy=False).ravel())
        offsets = xp.ascontiguousarray(xp.asarray(offsets).astype(np.int64, copy=False).ravel())
        F, bags = len(names), offsets.shape[0] - 1
        if not F or bags < 0 or bags % F:
            raise JaggedError(f"offsets of {offsets.shape[0]} entries for {F} features; give F·B + 1 of them "
                              "(one bag per feature and sample, feature-major)")
        host = to_host(offsets)  # the checks read them once, on the host
        if host[0] != 0:
            raise JaggedError(f"feature {names[0]!r}, row 0: offsets start at {int(host[0])}; they must start at 0")
        lengths = np.diff(host).reshape(F, -1)
        _check_lengths(names, lengths, max_bag)
        if host[-1] != values.shape[0]:
            raise JaggedError(f"feature {names[-1]!r}: offsets end at {int(host[-1])} but there are "
                              f"{values.shape[0]} values; the last offset must be the number of values")
        if weights is not None:
            weights = xp.ascontiguousarray(xp.asarray(weights).astype(np.float32, copy=False).ravel())
            if weights.shape[0] != values.shape[0]:
                raise JaggedError(f"{weights.shape[0]} weights for {values.shape[0]} values; give one weight per "
                                  "key, or none")
        return cls(names, values, offsets, weights, bags // F)

    @classmethod
    def from_dense(cls, names, sparse):
        """Single-hot features from ``sparse [B, F]``: one key per bag."""
        xp = get_array_module(sparse)
        sparse = xp.asarray(sparse)
        if sparse.ndim != 2:
            raise JaggedError(f"sparse of shape {sparse.shape}; from_dense takes [B, F]")
        names = _names(names)
        if sparse.shape[1] != len(names):
            raise JaggedError(f"sparse has {sparse.shape[1]} columns for {len(names)} feature names")
        return cls(names, xp.ascontiguousarray(sparse.T.astype(np.int64)).ravel(),
                   xp.arange(sparse.size + 1, dtype=np.int64), None, sparse.shape[0])

    def lengths(self):
        """``[F, B]`` keys per bag."""
        return (self.offsets[1:] - self.offsets[:-1]).reshape(self.n_features, self.batch_size)

    @property
    def single_hot(self):
        """Whether every bag holds exactly one key and no weights are given: then ``dense()`` is the batch."""
        return self.weights is None and self.values.shape[0] == self.n_features * self.batch_size and \
            bool(to_host((self.offsets[1:] - self.offsets[:-1] == 1).all()))

    def dense(self):
        """``[B, F]`` keys of a single-hot batch (a view where the layout allows)."""
        if not self.single_hot:
            raise JaggedError("dense(): the batch has bags of other than one key (or weights); pool it instead")
        return self.values.reshape(self.n_features, self.batch_size).T

    def feature(self, f):
        """``(keys, offsets [B+1] from 0, weights or None)`` of feature ``f`` (an index or a name)."""
        f = self.names.index(f) if isinstance(f, str) else f
        B = self.batch_size
        bounds = self.offsets[f * B:(f + 1) * B + 1]
        a, b = (int(x) for x in to_host(bounds[[0, -1]]))  # one read of the two ends
        return self.values[a:b], bounds - a, None if self.weights is None else self.weights[a:b]

    def take(self, rows):
        """The samples ``rows`` (a slice, indices or a mask over the batch, as NumPy takes them), in that order, as
        jagged features of their own: each feature's bags of those samples, feature-major as ever, copied. A
        loader's or a rank's part of a batch, and ``jagged[rows]`` too."""
        B, F = self.batch_size, self.n_features
        rows = np.atleast_1d(np.arange(B)[to_host(rows) if not isinstance(rows, slice) else rows])
        bags = (np.arange(F)[:, None] * B + rows[None, :]).ravel()
        offsets = to_host(self.offsets)  # one read: the gather is planned on the host and done where the values are
        sizes = offsets[bags + 1] - offsets[bags]
        xp = get_array_module(self.values)
        at = xp.asarray(concat_ranges(offsets[bags], sizes))
        return JaggedFeatures(self.names, self.values[at], xp.asarray(np.concatenate([[0], np.cumsum(sizes)])),
                              None if self.weights is None else self.weights[at], rows.size)

    __getitem__ = take

    def arrays(self):
        """The fields that are arrays, by name: each a DLPack producer for another stack."""
        out = {"values": self.values, "offsets": self.offsets}
        if self.weights is not None:
            out["weights"] = self.weights
        return out


def _names(names):
    names = tuple(names)
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise JaggedError(f"feature names {names!r}; give one distinct non-empty string per feature")
    return names


def _check_lengths(names, lengths, max_bag):
    """Each bag's length, ``[F, B]`` on the host: none negative, none over ``max_bag``; the first bad one named."""
    for bad, what in ((lengths < 0, "a negative length"),
                      (lengths > max_bag if max_bag is not None else None, f"more than max_bag={max_bag} keys")):
        if bad is not None and bad.any():
            f, row = np.argwhere(bad)[0]
            raise JaggedError(f"feature {names[f]!r}, row {row}: {what} ({int(lengths[f, row])}); "
                              + ("lengths count keys, from 0" if max_bag is None or lengths[f, row] < 0 else
                                 "raise the cap, or truncate the bag when the data is made"))
