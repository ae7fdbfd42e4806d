"""Benchmark cases of a batch's unique keys (``gpuemb.kernels.unique``), what every lookup of the store starts
with, on a single-hot and an MLPerf multi-hot batch of Zipf keys; ``torch.unique`` (a sort) as the peer, and
``backend.unique`` (a sort of every key, what the store ran before) beside them."""
import numpy as np

import benchlib
from gpuemb.autograd import backend
from gpuemb.io.synthetic import MLPERF_HOTNESS
from gpuemb.kernels.unique import unique_keys


def _keys(B, hotness, cap):
    rng = np.random.default_rng(5)
    n = B * sum(hotness)
    return (np.minimum(rng.zipf(1.05, n), cap) * 0x9E3779B1 + np.repeat(np.arange(len(hotness)), hotness).repeat(B)
            ).astype(np.int64)  # Zipf ids per feature, features apart


def _cases(xp, B, hotness, cap, name):
    keys_h = _keys(B, hotness, cap)
    keys = xp.asarray(keys_h)
    torch, device = benchlib.peer(xp)
    peer = None
    if torch is not None:
        tk = torch.as_tensor(keys_h, device=device)
        peer = lambda: torch.unique(tk, return_inverse=True)  # noqa: E731
    shape = f"{name}: {keys_h.size:,} keys, {np.unique(keys_h).size:,} distinct"
    moved = 8 * keys_h.size * 2  # the keys read, each key's index written
    return [benchlib.Case("unique_keys", shape, lambda: unique_keys(keys), bytes=moved, torch_run=peer),
            benchlib.Case("unique by one sort (backend.unique)", shape,
                          lambda: backend.unique(keys, return_inverse=True), bytes=moved, torch_run=peer)]


def cases(xp, quick):
    """Unique-key cases on the array module xp; quick: small batches."""
    B = 256 if quick else 4096
    return _cases(xp, B, (1,) * 26, 1000, "single-hot B=%d" % B) + _cases(xp, B, MLPERF_HOTNESS, 1000,
                                                                          "MLPerf multi-hot B=%d" % B)
