"""A rank's pooled features as one feature-major CSR on the host: what a sharded collection routes to the owners.

``ShardedEmbeddingCollection`` takes what ``EmbeddingCollection`` takes for pooled features: a ``[B,
sum(hotness)]`` matrix under fixed ``hotness``, ``JaggedFeatures``, or a list of F ``(keys, offsets[, weights])``
bags. Whatever came in, the routing reads ``LocalBags``: every key once, feature after feature and bag after bag
(bag ``f·B + b``), mixed with its feature's index where the features share a table, with its weight where any
feature has weights (a feature without them weighs each key 1, as in one process).
"""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.backend import to_host
from gpuemb.io.bags import concat_ranges
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.store.collection import _host_bag, feature_keys, mixed_keys

OWNER = "ShardedEmbeddingCollection"


@dataclass(frozen=True, eq=False)
class LocalBags:
    """``values [N]`` int64 (mixed where shared), ``lengths [F, B]`` int64, ``weights [N]`` float32 or None."""
    values: np.ndarray
    lengths: np.ndarray
    weights: np.ndarray = None

    def sample_major(self, feats):
        """``(positions b·F + f in [B, F], flat bag ids f·B + b)`` of the bags of features ``feats``, sample after
        sample: each peer's bags in that order, peer after peer, are the global batch's order on any world size."""
        F, B = self.lengths.shape
        feats = np.asarray(feats)
        return ((np.arange(B)[:, None] * F + feats[None, :]).reshape(-1),
                (feats[None, :] * B + np.arange(B)[:, None]).reshape(-1))

    def keys_of(self, bags):
        """``(index [K] into values, lengths [n])`` of the flat bag ids ``bags`` (``f·B + b``), bag after bag."""
        flat = self.lengths.reshape(-1)
        starts = np.cumsum(flat) - flat
        return concat_ranges(starts[bags], flat[bags]), flat[bags]


def local_bags(sparse, n_features, shared, hotness, mode):
    """``sparse`` (see the module docstring) as ``LocalBags``; ValueError, one line, for what does not fit."""
    if isinstance(sparse, JaggedFeatures):
        if sparse.n_features != n_features:
            raise ValueError(f"{OWNER}: jagged features of {sparse.n_features} features for a collection of "
                             f"{n_features}; give one bag per feature and sample")
        lengths = np.diff(to_host(sparse.offsets)).reshape(n_features, sparse.batch_size)
        values, weights = to_host(sparse.values), None if sparse.weights is None else to_host(sparse.weights)
    elif isinstance(sparse, (list, tuple)):
        values, lengths, weights = _from_bag_list(sparse, n_features)
    else:
        values, lengths = _from_hotness(sparse, hotness)
        weights = None
    if weights is not None and mode != "sum":
        raise ValueError(f"{OWNER}: per-key weights make a weighted sum, but the collection pools by "
                         f"mode={mode!r}; build it with mode='sum' or drop the weights")
    values = np.asarray(values, np.int64)
    if shared:  # each key moved into its feature's part of the shared key space
        values = feature_keys(values, np.repeat(np.arange(n_features), lengths.sum(axis=1)))
    return LocalBags(values, np.asarray(lengths, np.int64),
                     None if weights is None else np.asarray(weights, np.float32))


def _from_bag_list(bags, n_features):
    if len(bags) != n_features:
        raise ValueError(f"{OWNER}: {len(bags)} (keys, offsets) bags for {n_features} features; give one per "
                         "feature")
    bags = [_host_bag(f, bag) for f, bag in enumerate(bags)]
    sizes = {o.size - 1 for _, o, _ in bags}
    if len(sizes) != 1:
        raise ValueError(f"{OWNER}: the features' offsets give batches of {sorted(sizes)} samples; give every "
                         "feature one bag per sample of the batch")
    values = np.concatenate([k[o[0]:o[-1]] for k, o, _ in bags])
    lengths = np.stack([np.diff(o) for _, o, _ in bags])
    if all(w is None for _, _, w in bags):
        return values, lengths, None
    return values, lengths, np.concatenate([np.ones(o[-1] - o[0]) if w is None else w[o[0]:o[-1]]
                                            for _, o, w in bags])


def _from_hotness(sparse, hotness):
    """A ``[B, sum(hotness)]`` matrix as bags: feature f's ``hotness[f]`` columns, row by row."""
    if hotness is None:
        raise ValueError(f"{OWNER}: a matrix of keys pools only under fixed hotness; pass one key per feature "
                         "([B, F]), JaggedFeatures or (keys, offsets) bags")
    width = int(sum(hotness))
    keys = mixed_keys(to_host(sparse), width, False, OWNER,
                      f" with hotness {hotness}: [B, {width}], each feature's keys side by side")
    ends = np.cumsum(hotness)
    values = np.concatenate([keys[:, e - h:e].reshape(-1) for h, e in zip(hotness, ends)])
    return values, np.repeat(np.asarray(hotness, np.int64)[:, None], keys.shape[0], axis=1)
