"""EmbeddingCollection: the embeddings of F sparse features as one layer, ``[B, F, D]`` out.

Either each feature has its own table, or several features share one table (one key space, one cache, one
snapshot): a feature's keys are then mixed with its index by a bijective 64-bit hash (splitmix64's finaliser over
``key + f·golden``), so within a feature no two keys meet and across features a collision has odds of about
2**-64 per pair. A shared table serves a whole batch in one lookup.

The rows are updated by the tables themselves in the backward, so the collection has no dense parameters. In
eval mode (``collection.eval()``) lookups do not insert keys: an unseen key reads as its initial weights.
"""
import numpy as np

from gpuemb.autograd import backend, concat
from gpuemb.autograd.backend import get_array_module
from gpuemb.io.hashing import GOLDEN, splitmix64_finalizer
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.kernels.embedding_bag import MODES
from gpuemb.nn.module import Module

from .table import EmbeddingTable


def feature_keys(keys, feature):
    """``keys`` (int64) of feature ``feature`` moved into its own part of a shared key space; ``feature`` may be an
    array that broadcasts against ``keys`` (``np.arange(F)`` for ``keys [B, F]``)."""
    xp = get_array_module(keys, feature)
    keys = keys.astype(np.int64, copy=False) if backend.is_device_array(keys) else np.asarray(keys, np.int64)
    step = np.uint64(feature + 1) if np.isscalar(feature) else feature.astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):  # the hash wraps around 2**64 on purpose, on either device
        z = keys.view(np.uint64) + step * GOLDEN
        return xp.ascontiguousarray(splitmix64_finalizer(z)).view(np.int64)


def stackable(configs, n_features, owner, mixed=False):
    """``(configs as a list, their dim)``, checked to make one ``[B, F, D]``: one config with ``n_features``
    (a shared table) or one per feature, all of one dim; ``owner`` names the caller in errors. ``mixed``: tables
    of several dims are allowed, and the dim is None (their rows go side by side, ``[B, sum of dims]``)."""
    configs = list(configs) if isinstance(configs, (list, tuple)) else [configs]
    if n_features is not None and len(configs) != 1:
        raise ValueError(f"{owner}: a shared table takes one config, got {len(configs)}; pass one "
                         "TableConfig with n_features, or a list of configs without it")
    dims = {c.dim for c in configs}
    if len(dims) != 1 and not mixed:
        raise ValueError(f"{owner}: tables of dims {sorted(dims)} cannot stack into [B, F, D]; give every table "
                         "the same dim")
    return configs, dims.pop() if len(dims) == 1 else None


def mixed_keys(sparse, n_features, shared, owner, note=""):
    """``sparse [B, F]`` as the int64 keys the tables hold, on the device it came from (a device batch's keys never
    leave it): each feature's keys mixed with its index where the ``n_features`` features share one table;
    ``owner`` names the caller and ``note`` adds to the shape error."""
    xp = get_array_module(sparse)
    sparse = sparse.astype(np.int64, copy=False) if backend.is_device_array(sparse) else np.asarray(sparse, np.int64)
    if sparse.ndim != 2 or sparse.shape[1] != n_features:
        raise ValueError(f"{owner}: sparse has shape {sparse.shape}; want [B, F]: this collection has {n_features} "
                         f"features{note}")
    return feature_keys(sparse, xp.arange(n_features)) if shared else sparse


def feature_major(bags, xp):
    """One lookup's ``(keys, offsets)`` from F features' ``(keys, offsets [B+1])`` bags, feature after feature."""
    starts = np.cumsum([0] + [int(k.shape[0]) for k, _ in bags[:-1]])
    keys = xp.concatenate([k for k, _ in bags])
    ends = [xp.full(1, keys.shape[0], np.int64)]
    return keys, xp.concatenate([o[:-1] + int(s) for (_, o), s in zip(bags, starts)] + ends)


def fixed_hotness(hotness, n_features, owner):
    """``hotness`` (keys per feature in every row, fixed) checked against ``n_features``; None where every feature
    has one key, which is the single-hot fast path."""
    if hotness is None:
        return None
    hot = tuple(hotness)
    if len(hot) != n_features or not all(isinstance(h, (int, np.integer)) and h >= 1 for h in hot):
        raise ValueError(f"{owner}: hotness={hot!r}; give one int >= 1 per feature ({n_features} features), the "
                         "keys each row holds for it, or None for one key each")
    return None if max(hot) == 1 else tuple(int(h) for h in hot)


class EmbeddingCollection(Module):
    """F features over ``configs``: one ``TableConfig`` per feature, or one config and ``n_features`` to share it.

    ``forward(sparse)``, ``[B, F, D]`` out (with ``mixed_dims`` and tables of several dims, each sample's rows side
    by side, ``[B, sum of dims]``: ``width``), each feature's keys pooled by ``mode`` ("sum", "mean" or "max") where
    it has several:
    - ``sparse [B, F]`` int64, one key per feature (the fast path: a gather, no pooling);
    - with ``hotness`` (F ints: a fixed number of keys per feature, as MLPerf's multi-hot Criteo has),
      ``sparse [B, sum(hotness)]``, feature f's keys in its own run of columns;
    - ``JaggedFeatures`` (``gpuemb.io.jagged``): bags of any length, with per-key weights where it has them; a
      single-hot batch takes the fast path;
    - a list of F ``(keys, offsets)`` bags, or ``(keys, offsets, weights)`` for a weighted sum (mode "sum"; the
      weights are data: no gradient reaches them).
    """

    def __init__(self, configs, n_features=None, mode="sum", hotness=None, mixed_dims=False):
        if mode not in MODES:
            raise ValueError(f"EmbeddingCollection: mode={mode!r}; use one of {', '.join(MODES)}")
        configs, self.dim = stackable(configs, n_features, "EmbeddingCollection", mixed_dims)
        self.shared = n_features is not None
        self.tables = [EmbeddingTable(c) for c in configs]
        self.n_features = n_features if self.shared else len(configs)
        self.dims = tuple(c.dim for c in configs) * (self.n_features if self.shared else 1)  # per feature
        self.width = sum(self.dims)  # of one sample's embeddings side by side
        self.mode = mode
        self.hotness = fixed_hotness(hotness, self.n_features, "EmbeddingCollection")

    def table_keys(self, sparse):
        """``[(table, keys)]``: the keys each table looks up in a forward on ``sparse`` (int64 ``[B, F]``, or
        ``[B, sum(hotness)]``), in the order the forward looks them up. A prefetch given the same keys hands the
        lookup its sort and pinned slots."""
        sparse = self._input(sparse)
        if isinstance(sparse, (list, tuple)):
            return [(t, keys) for t, keys, _, _ in self._bag_lookups(sparse)]
        return [(t, keys) for t, keys, _ in self._lookups(sparse)]

    def _input(self, sparse):
        """``sparse`` as a matrix (single-hot or fixed hotness) or as a list of F bags."""
        if isinstance(sparse, JaggedFeatures):
            if sparse.single_hot and self.hotness is None:
                return sparse.dense()
            parts = 3 if sparse.weights is not None else 2
            return [sparse.feature(f)[:parts] for f in range(sparse.n_features)]
        return sparse

    def _lookups(self, sparse):
        """``[(table, keys, offsets or None)]`` of a forward on the matrix ``sparse``, on its device."""
        if self.hotness is None:
            keys = mixed_keys(sparse, self.n_features, self.shared, "EmbeddingCollection")
            if self.shared:
                return [(self.tables[0], keys.reshape(-1), None)]
            return [(t, keys[:, f], None) for f, t in enumerate(self.tables)]
        hot = self.hotness
        xp = get_array_module(sparse)
        columns = np.repeat(np.arange(self.n_features), hot)  # the feature of each column
        keys = mixed_keys(sparse, columns.size, False, "EmbeddingCollection",
                          f" with hotness {hot}: [B, {columns.size}], each feature's keys side by side")
        if self.shared:
            keys = feature_keys(keys, xp.asarray(columns))
        B, ends = keys.shape[0], np.cumsum(hot)
        bags = [(xp.ascontiguousarray(keys[:, e - h:e]).reshape(-1), xp.arange(B + 1, dtype=np.int64) * h)
                for h, e in zip(hot, ends)]
        if not self.shared:
            return [(t, k, o) for t, (k, o) in zip(self.tables, bags)]
        return [(self.tables[0], *feature_major(bags, xp))]

    def forward(self, sparse):
        sparse = self._input(sparse)
        if isinstance(sparse, (list, tuple)):
            return self._pooled(sparse)
        B = np.shape(sparse)[0]
        rows = [t.lookup(k, o, None if o is None else self.mode, self.training) for t, k, o in self._lookups(sparse)]
        if not self.shared:
            return self._side_by_side(rows, B)
        if self.hotness is None:
            return rows[0].reshape(B, self.n_features, self.dim)
        return rows[0].reshape(self.n_features, B, self.dim).transpose(1, 0, 2)

    def _bag_lookups(self, bags):
        """``[(table, keys, offsets, weights or None)]`` of a forward on F bags, on the host."""
        if len(bags) != self.n_features:
            raise ValueError(f"EmbeddingCollection: {len(bags)} (keys, offsets) bags for {self.n_features} features")
        bags = [_host_bag(f, bag) for f, bag in enumerate(bags)]
        if not self.shared:
            return [(t, k, o, w) for t, (k, o, w) in zip(self.tables, bags)]
        # bags in feature-major order, one lookup: [F·B, D]
        keys, offsets = feature_major([(feature_keys(k, f), o) for f, (k, o, _) in enumerate(bags)], np)
        weighted = any(w is not None for _, _, w in bags)  # then a feature without weights weighs each key 1
        weights = np.concatenate([np.ones(k.size) if w is None else w for k, _, w in bags]) if weighted else None
        return [(self.tables[0], keys, offsets, weights)]

    def _pooled(self, bags):
        lookups = self._bag_lookups(bags)  # checks the bags
        B = (lookups[0][2].size - 1) // (self.n_features if self.shared else 1)
        rows = [t.lookup(k, o, self.mode, self.training, w) for t, k, o, w in lookups]
        if self.shared:  # [F·B, D] -> [B, F, D]
            return rows[0].reshape(self.n_features, B, self.dim).transpose(1, 0, 2)
        return self._side_by_side(rows, B)

    def _side_by_side(self, rows, B):
        """Each feature's ``[B, d]`` rows as ``[B, F, D]``, or as ``[B, sum of dims]`` where the dims differ."""
        if self.dim is None:
            return concat([r.reshape(B, d) for r, d in zip(rows, self.dims)], axis=1)
        return concat([r.reshape(B, 1, self.dim) for r in rows], axis=1)


def _host_bag(feature, bag):
    """Feature ``feature``'s ``(keys, offsets)`` or ``(keys, offsets, weights)`` as host ``(keys, offsets,
    weights or None)``, its weights one per key."""
    if len(bag) not in (2, 3):
        raise ValueError(f"EmbeddingCollection: feature {feature}'s bag has {len(bag)} parts; give (keys, offsets) "
                         "or (keys, offsets, weights)")
    keys, offsets = (np.asarray(backend.to_host(a), np.int64) for a in bag[:2])
    weights = np.asarray(backend.to_host(bag[2]), np.float64) if len(bag) == 3 else None
    if weights is not None and weights.shape != keys.shape:
        raise ValueError(f"EmbeddingCollection: feature {feature} has weights of shape {weights.shape} for keys of "
                         f"shape {keys.shape}; give one weight per key")
    return keys, offsets, weights
