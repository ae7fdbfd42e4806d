"""Pooling a feature's bags of rows with NumPy, as the training forward's embedding bag does
(``gpuemb/kernels/embedding_bag.py``): sum, mean or max element-wise, or a sum weighted per key; an empty bag
pools to zeros in every mode (max included: the kernel starts each bag at zero and takes no row)."""
import numpy as np


def pool(rows, offsets, mode, weights=None):
    """``[B, D]`` float32: the rows ``[N, D]`` of bag b, ``rows[offsets[b]:offsets[b + 1]]``, pooled by ``mode``
    ("sum", "mean", "max"); ``weights [N]`` weigh a sum. ``offsets`` None: one row per bag, as it is."""
    if weights is not None:  # the kernel rounds each product to the rows' dtype before it adds
        rows = rows * weights.astype(np.float32)[:, None]
    if offsets is None:
        return rows
    sizes = np.diff(offsets)
    out = np.zeros((sizes.size, rows.shape[1]), np.float32)
    full = sizes > 0  # reduceat would give an empty bag the next bag's first row
    if full.any():
        reduce = np.maximum if mode == "max" else np.add
        out[full] = reduce.reduceat(rows, offsets[:-1][full], axis=0)
        if mode == "mean":
            out[full] /= sizes[full, None].astype(np.float32)
    return out
