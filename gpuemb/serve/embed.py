"""The graph's embedding inputs of a batch: each collection's keys looked up in the bundle's tables and pooled per
feature, as the training model's ``EmbeddingCollection`` does in eval.

Features that share one table have their keys mixed with the feature's index first and are looked up together
(one lookup per table); each feature's bags are then pooled by the collection's mode (``pooling.py``) and the
features' rows put side by side, ``[B, width]``, which is ``[B, F, D]`` where every feature has one dim.
"""
import numpy as np

from .errors import BundleError
from .keys import feature_keys
from .pooling import pool


class Embedder:
    """The lookups of the manifest's ``collections`` in ``tables`` (``{name: BundleTable}``): ``feed(B, bags)``."""

    def __init__(self, collections, tables):
        self.collections, self.tables = collections, tables

    def feed(self, B, bags):
        """``{graph input: array}`` of the batch's ``bags`` (one ``features.Bags`` per feature, B samples)."""
        return {c["input"]: self._collection(c, B, bags) for c in self.collections.values()}

    def _collection(self, c, B, bags):
        mode = c["pooling"]
        if mode != "sum" and any(b.weights is not None for b in bags):
            raise BundleError(f"predict: the sparse features carry weights, but the bundle's model pools bags by "
                              f"{mode}; weights weigh a sum only (pooling sum): leave them out")
        pooled = [pool(rows, b.offsets, mode, b.weights) for rows, b in zip(self._rows(c, bags), bags)]
        out = np.concatenate(pooled, axis=1)
        return out if c["dim"] is None else out.reshape(B, len(bags), c["dim"])

    def _rows(self, c, bags):
        """Each feature's rows ``[N_f, D_f]``, one per key of its bags."""
        if not c["shared"]:
            return [self.tables[name].lookup(b.keys) for name, b in zip(c["feature_tables"], bags)]
        sizes = [b.keys.size for b in bags]
        keys = np.concatenate([feature_keys(b.keys, f) for f, b in enumerate(bags)])
        return np.split(self.tables[c["feature_tables"][0]].lookup(keys), np.cumsum(sizes)[:-1])
