"""EmbeddingCollection: the embeddings of F sparse features as one layer, ``[B, F, D]`` out.

Either each feature has its own table, or several features share one table (one key space, one cache, one
snapshot): a feature's keys are then mixed with its index by a bijective 64-bit hash (``mixing.py``), so within a
feature no two keys meet and across features a collision has odds of about 2**-64 per pair.

Either way a batch costs one lookup per physical store, not per table: a shared table is one store, and tables of
their own that share a row format are batched into one (``batched.py``). Each store's keys are gathered from the
batch, mixed where the store holds several key spaces, looked up, and its rows put in the features' order, by a
fixed number of array calls whatever the number of features.

The rows are updated by the tables themselves in the backward, so the collection has no dense parameters. In
eval mode (``collection.eval()``) lookups do not insert keys: an unseen key reads as its initial weights.
"""
import numpy as np

from gpuemb.autograd import backend, concat
from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.ops.shape import take
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.key_types import integer_keys
from gpuemb.kernels.embedding_bag import MODES
from gpuemb.nn.module import Module

from .batched import batch_tables
from .mixing import feature_keys
from .table import EmbeddingTable


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
    sparse = integer_keys(sparse, f"{owner}: sparse")
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


class Part:
    """What one physical store serves of a collection: the ``features`` (indices) it looks up, and the key space
    each of them takes in it (``spaces``, None: the keys as they are); ``tagged``: the spaces are the store's
    tables, so the lookup passes them on as tags."""

    def __init__(self, store, features, spaces, tagged):
        self.store, self.features, self.tagged = store, np.asarray(features), tagged
        self.spaces = None if spaces is None else np.asarray(spaces, np.int32)
        self._arrays = {}  # the index arrays the lookups take, by what they are for (and the batch size)

    def array(self, what, make, xp):
        """``make(xp)``: an index array made with ``xp`` (NumPy, or the device's module), once per ``what``."""
        key = (what, xp is np)
        if key not in self._arrays:
            self._arrays[key] = make(xp)
        return self._arrays[key]

    def uploaded(self, what, host, xp):
        """The NumPy array ``host()`` on ``xp``'s device, copied there once per ``what``."""
        return self.array(what, lambda xp: xp.asarray(host()), xp)

    def spaces_on(self, xp, what=("spaces",)):
        """``spaces`` (int32) on ``xp``'s device: made there where they count 0, 1, ... (a shared table's features,
        a store's tables in order), so a run's first step uploads nothing for them."""
        if (self.spaces == np.arange(self.spaces.size)).all():
            return self.array(what, lambda xp: xp.arange(self.spaces.size, dtype=np.int32), xp)
        return self.uploaded(what, lambda: self.spaces, xp)

    def matrix_keys(self, sparse, n_columns):
        """``(keys [B·F], tags or None)``: the part's keys of the matrix ``sparse [B, n_columns]`` (on its device),
        row-major, one column per feature."""
        xp, B = get_array_module(sparse), sparse.shape[0]
        if self.features.size != n_columns or (self.features != np.arange(n_columns)).any():
            sparse = sparse[:, self.uploaded(("columns",), lambda: self.features, xp)]
        if self.spaces is None:
            return self._mixed(sparse, None)
        return self._mixed(sparse, self.array(("matrix", B), lambda xp: xp.tile(self.spaces_on(xp), B), xp))

    def _mixed(self, keys, spaces):
        """``keys`` flat, mixed with the key space of each (``spaces``, on their device), and the tags where the
        store takes them."""
        keys = keys.reshape(-1)
        if self.spaces is None:  # a copy where it would be a view of the caller's batch, which a loader may reuse
            return (keys.copy() if keys.base is not None else keys), None
        return feature_keys(keys, spaces), spaces if self.tagged else None


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

    ``tables``: each table (per feature, or the shared one), with its own name, config, keys and snapshot;
    ``stores``: the physical stores they live in, one lookup each a batch (``batched=False``: one per table).
    """

    def __init__(self, configs, n_features=None, mode="sum", hotness=None, mixed_dims=False, batched=True):
        if mode not in MODES:
            raise ValueError(f"EmbeddingCollection: mode={mode!r}; use one of {', '.join(MODES)}")
        configs, self.dim = stackable(configs, n_features, "EmbeddingCollection", mixed_dims)
        self.shared = n_features is not None
        self.n_features = n_features if self.shared else len(configs)
        self.dims = tuple(c.dim for c in configs) * (self.n_features if self.shared else 1)  # per feature
        self.width = sum(self.dims)  # of one sample's embeddings side by side
        self.mode = mode
        self.hotness = fixed_hotness(hotness, self.n_features, "EmbeddingCollection")
        if self.shared:
            self.tables = self.stores = [EmbeddingTable(configs[0])]
            self.parts = [Part(self.tables[0], range(self.n_features), range(self.n_features), False)]
        else:
            self.stores, self.tables = batch_tables(configs, batched)
            self.parts = [self._part(store) for store in self.stores]
        order = np.concatenate([p.features for p in self.parts])
        self._order = None if (order == np.arange(self.n_features)).all() else order
        self._ahead = None  # (sparse, its lookups) of the batch table_keys was last given, for its forward

    def _part(self, store):
        features = [f for f, t in enumerate(self.tables) if getattr(t, "store", t) is store]
        if store.n_tables == 1:
            return Part(store, features, None, False)
        return Part(store, features, [self.tables[f].tag for f in features], True)

    def table_keys(self, sparse):
        """``[(store, keys, tags)]``: the keys each physical store looks up in a forward on ``sparse`` (int64
        ``[B, F]``, or ``[B, sum(hotness)]``), in the order the forward looks them up, with their tags where the
        store holds several tables. A prefetch given the same keys hands the lookup its sort and pinned slots: the
        forward on the same ``sparse`` object looks up these very arrays, so the store sees it without comparing
        them (a read of the device). The keys are the collection's own: nothing else writes them."""
        lookups = self._lookups(self._input(sparse))
        self._ahead = (sparse, lookups)
        return [(part.store, keys, tags) for part, keys, _, _, tags in lookups]

    def _input(self, sparse):
        """``sparse`` as a matrix (single-hot or fixed hotness), as ``JaggedFeatures``, or as a list of F bags."""
        if isinstance(sparse, JaggedFeatures):
            if sparse.single_hot and self.hotness is None:
                return sparse.dense()
            if len(self.parts) == 1:
                return sparse  # feature-major already: one store takes it as it is
            parts = 3 if sparse.weights is not None else 2
            return [sparse.feature(f)[:parts] for f in range(sparse.n_features)]
        return sparse

    def _lookups(self, sparse):
        """``[(part, keys, offsets or None, weights or None, tags or None)]`` of a forward, one per store."""
        if isinstance(sparse, JaggedFeatures):
            return [self._jagged(self.parts[0], sparse)]
        if isinstance(sparse, (list, tuple)):
            if len(sparse) != self.n_features:
                raise ValueError(f"EmbeddingCollection: {len(sparse)} (keys, offsets) bags for {self.n_features} "
                                 "features")
            bags = [_host_bag(f, bag) for f, bag in enumerate(sparse)]
            return [self._bags(part, [bags[f] for f in part.features]) for part in self.parts]
        if self.hotness is None:
            sparse = mixed_keys(sparse, self.n_features, False, "EmbeddingCollection")
            return [(p, keys, None, None, tags) for p in self.parts
                    for keys, tags in [p.matrix_keys(sparse, self.n_features)]]
        hot = np.asarray(self.hotness)
        C = int(hot.sum())
        sparse = mixed_keys(sparse, C, False, "EmbeddingCollection",
                            f" with hotness {self.hotness}: [B, {C}], each feature's keys side by side")
        return [self._multi_hot(p, sparse, hot) for p in self.parts]

    def _multi_hot(self, part, sparse, hot):
        """A part's lookup of fixed-hotness keys: its features' bags feature after feature, by one gather."""
        B, starts = sparse.shape[0], np.concatenate([[0], np.cumsum(hot)[:-1]])
        h = hot[part.features]

        def flat():  # the position in sparse.ravel() of each key, feature-major: feature, then row, then column
            return np.concatenate([(np.arange(B)[:, None] * hot.sum() + s + np.arange(n)).ravel()
                                   for s, n in zip(starts[part.features], h)])

        xp = get_array_module(sparse)
        at = part.uploaded(("multi-hot", B), flat, xp)
        spaces = None if part.spaces is None else part.array(
            ("multi-hot spaces", B), lambda xp: xp.repeat(part.spaces_on(xp), (h * B).tolist()), xp)
        keys, tags = part._mixed(sparse.reshape(-1)[at], spaces)
        offsets = part.uploaded(("multi-hot offsets", B),
                                lambda: np.concatenate([[0], np.cumsum(np.repeat(h, B))]).astype(np.int64), xp)
        return part, keys, offsets, None, tags

    def _jagged(self, part, jagged):
        """The one store's lookup of ``JaggedFeatures``, as they are (feature-major): the key space of each key
        from the bag it is in, on the device, nothing read back."""
        xp, B = get_array_module(jagged.values), jagged.batch_size
        keys = integer_keys(jagged.values, "EmbeddingCollection: JaggedFeatures values")
        keys, offsets = keys.astype(np.int64, copy=False), jagged.offsets.astype(np.int64, copy=False)
        if part.spaces is None:
            return part, keys, offsets, jagged.weights, None
        feature = (xp.searchsorted(offsets, xp.arange(keys.shape[0]), side="right") - 1) // B
        spaces = part.spaces_on(xp)[feature]
        return part, feature_keys(keys, spaces), offsets, jagged.weights, spaces if part.tagged else None

    def _bags(self, part, bags):
        """A part's lookup of its features' ``(keys, offsets, weights)`` host bags, feature after feature."""
        spaces = [None] * len(bags) if part.spaces is None else part.spaces
        keys, offsets = feature_major([(k if s is None else feature_keys(k, s), o)
                                       for (k, o, _), s in zip(bags, spaces)], np)
        weighted = any(w is not None for _, _, w in bags)  # then a feature without weights weighs each key 1
        weights = np.concatenate([np.ones(k.size) if w is None else w for k, _, w in bags]) if weighted else None
        tags = np.repeat(part.spaces, [k.size for k, _, _ in bags]).astype(np.int32) if part.tagged else None
        return part, keys, offsets, weights, tags

    def forward(self, sparse):
        ahead, self._ahead = self._ahead, None
        lookups = ahead[1] if ahead is not None and ahead[0] is sparse else self._lookups(self._input(sparse))
        outs = []
        for part, keys, offsets, weights, tags in lookups:
            F = part.features.size
            B = keys.shape[0] // F if offsets is None else (offsets.shape[0] - 1) // F
            if offsets is None:
                rows = part.store.lookup(keys, insert=self.training, tags=tags).reshape(B, F, -1)
            else:  # pooled bags come feature after feature
                rows = part.store.lookup(keys, offsets, self.mode, self.training, weights, tags)
                rows = rows.reshape(F, B, -1).transpose(1, 0, 2)
            outs.append(rows.reshape(B, -1) if self.dim is None else rows)
        return self._in_feature_order(outs, B)

    def _in_feature_order(self, outs, B):
        """The parts' rows ``[B, F_s, D]`` (or ``[B, F_s·D_s]`` of mixed dims) as ``[B, F, D]`` (``[B, width]``)
        in the features' order: one concat and one gather, none where one store serves every feature in order."""
        out = outs[0] if len(outs) == 1 else concat(outs, axis=1)
        if self._order is None:
            return out
        if self.dim is not None:
            return take(out, self._perm(("feature order", B), lambda: np.argsort(self._order)), axis=1)
        dims = np.asarray(self.dims)

        def columns():  # the column of the concatenated rows that each output column comes from
            starts = np.concatenate([[0], np.cumsum(dims[self._order])[:-1]])
            at = dict(zip(self._order.tolist(), starts.tolist()))
            return np.concatenate([at[f] + np.arange(d) for f, d in enumerate(dims)])
        return take(out, self._perm(("column order", B), columns), axis=1)

    def _perm(self, what, make):
        return self.parts[0].uploaded(what, make, backend.xp)


def _host_bag(feature, bag):
    """Feature ``feature``'s ``(keys, offsets)`` or ``(keys, offsets, weights)`` as host ``(keys, offsets,
    weights or None)``, its weights one per key."""
    if len(bag) not in (2, 3):
        raise ValueError(f"EmbeddingCollection: feature {feature}'s bag has {len(bag)} parts; give (keys, offsets) "
                         "or (keys, offsets, weights)")
    keys = np.asarray(integer_keys(backend.to_host(bag[0]), f"EmbeddingCollection: feature {feature}'s bag"), np.int64)
    offsets = np.asarray(backend.to_host(bag[1]), np.int64)
    weights = np.asarray(backend.to_host(bag[2]), np.float64) if len(bag) == 3 else None
    if weights is not None and weights.shape != keys.shape:
        raise ValueError(f"EmbeddingCollection: feature {feature} has weights of shape {weights.shape} for keys of "
                         f"shape {keys.shape}; give one weight per key")
    return keys, offsets, weights
