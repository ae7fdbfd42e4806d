"""The keys a bundle's shared table holds: each feature's keys mixed with its index (the same bijection as
``gpuemb.store.collection.feature_keys``, which this runtime cannot import: that module loads the training
store)."""
import numpy as np

from gpuemb.io.hashing import GOLDEN, splitmix64_finalizer


def feature_keys(keys, features):
    """``keys`` (int64) of the features ``features`` (an index, or indices that broadcast against ``keys``), each
    moved into its feature's own part of the shared key space."""
    step = np.asarray(features).astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):  # the hash wraps around 2**64 on purpose
        return splitmix64_finalizer(np.asarray(keys, np.int64).view(np.uint64) + step * GOLDEN).view(np.int64)
