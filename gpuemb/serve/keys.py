"""The keys a bundle's tables hold for a batch ``sparse [B, F]``: as given, or, where the F features share one
table, each feature's keys mixed with its index (the same bijection as ``gpuemb.store.collection.feature_keys``,
which this runtime cannot import: that module loads the training store)."""
import numpy as np

from gpuemb.io.hashing import GOLDEN, splitmix64_finalizer


def feature_keys(sparse):
    """``sparse [B, F]`` (int64) with feature f's keys moved into its own part of a shared key space."""
    step = np.arange(sparse.shape[1], dtype=np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):  # the hash wraps around 2**64 on purpose
        return splitmix64_finalizer(sparse.view(np.uint64) + step * GOLDEN).view(np.int64)


def table_keys(sparse, shared):
    """``[keys of each table]``: one ``[B·F]`` array for a shared table, else feature f's ``[B]`` for table f."""
    if shared:
        return [feature_keys(sparse).reshape(-1)]
    return [np.ascontiguousarray(sparse[:, f]) for f in range(sparse.shape[1])]
