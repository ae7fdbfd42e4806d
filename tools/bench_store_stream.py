"""What every section of ``tools/bench_store.py`` shares: the Zipf key stream, the timed training loop, the copy
ceiling and the printed tables.

Keys: the universe is ids ``[0, n)``; a key is ``splitmix64(id)`` as int64, so keys are spread over all of int64
and never the small ints. A draw takes a Zipf rank ``r`` (exact, by the synthetic generator's rejection-inversion
sampler) and uses id ``r·stride mod n``, so the hot ids are scattered over the universe too: a table populated in
id order keeps its hot rows apart, as a real one would.
"""
import contextlib
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from bench_ops import copy_rate
from gpuemb.autograd import backend
from gpuemb.io.hashing import splitmix64
from gpuemb.io.synthetic import zipf_constants, zipf_rank

STRIDE = 2654435761  # a prime near 2**32 / golden ratio: coprime with any universe that is not its multiple


@numba.njit(cache=True)
def _zipf_ids(n_draws, universe, alpha, h1, hn, cut, seed):
    out = np.empty(n_draws, np.int64)
    state = np.uint64(seed)
    for i in range(n_draws):
        state, r = zipf_rank(state, universe, alpha, h1, hn, cut)
        out[i] = (np.uint64(r) * np.uint64(STRIDE)) % np.uint64(universe)
    return out


@numba.njit(parallel=True, cache=True)
def _keys_of(ids, out):
    for i in numba.prange(ids.shape[0]):
        out[i] = np.int64(splitmix64(np.uint64(ids[i])))


def keys_of(ids):
    """The key of each id ``[n]`` (int64): a bijection, so distinct ids give distinct keys."""
    ids = np.ascontiguousarray(ids, np.int64)
    out = np.empty_like(ids)
    _keys_of(ids, out)
    return out


def zipf_ids(steps, batch, universe, alpha=1.05, seed=1):
    """``steps * batch`` ids drawn Zipf(``alpha``) over ``[0, universe)``, hot ids scattered (module docstring)."""
    if universe % STRIDE == 0:
        raise ValueError(f"zipf_ids: universe={universe} is a multiple of the stride {STRIDE}; add one to it")
    return _zipf_ids(steps * batch, universe, alpha, *zipf_constants(universe, alpha), seed)


def zipf_keys(steps, batch, universe, alpha=1.05, seed=1):
    """``[steps, batch]`` keys of ``zipf_ids``."""
    return keys_of(zipf_ids(steps, batch, universe, alpha, seed)).reshape(steps, batch)


def unique_counts(stream):
    """The unique keys of each batch of ``stream [steps, batch]``."""
    return np.array([np.unique(keys).size for keys in stream])


def train(table, stream, grad, overlap=False):
    """Seconds to look up and update every batch of ``stream`` with the gradient ``grad [batch, dim]``.

    ``overlap``: as gpuemb's training ``Pipeline`` does, once batch i's lookup is done, one worker thread
    prefetches batch i+1's rows (``table.prefetch``, with the room read here, while batch i's rows are pinned)
    during batch i's update; batch i+1's lookup waits for it first."""
    start = time.perf_counter()
    with ThreadPoolExecutor(1, "bench-prefetch") if overlap else contextlib.nullcontext() as worker:
        job = None
        for i, keys in enumerate(stream):
            if job is not None:
                job.result()
            rows = table.lookup(keys)
            ahead = overlap and i + 1 < len(stream)
            job = worker.submit(_prefetch, table, stream[i + 1], table.room()) if ahead else None
            rows.backward(grad)
    backend.synchronize()
    return time.perf_counter() - start


def _prefetch(table, keys, room):
    backend.synchronize()  # on a GPU, the batch's lookup queued on the main stream is done before rows move
    table.prefetch(keys, room=room)


def hit_rates(before, after):
    """Each level's hit rate between two ``table.stats()``, top first (None where the level saw no key)."""
    rates = []
    for b, a in zip(before["levels"], after["levels"]):
        seen = a["hits"] + a["misses"] - b["hits"] - b["misses"]
        rates.append((a["hits"] - b["hits"]) / seen if seen else None)
    return rates


def moved_bytes(before, after, levels):
    """Bytes read plus written by the tiers of ``levels`` (indices) between two ``table.stats()``."""
    return sum(after["levels"][i][k] - before["levels"][i][k] for i in levels for k in ("bytes_read", "bytes_written"))


def copy_bandwidth(nbytes):
    """Bytes/s (read plus written) of a device-to-device copy of ``nbytes`` on the backend, and its label."""
    label = "cupy device-to-device copy" if backend.gpu_available() else "numpy copy (no GPU)"
    return copy_rate(backend.xp, nbytes), f"{label} of {nbytes / 2 ** 30:.2g} GiB"


def print_table(title, rows, columns):
    """Print ``rows`` (dicts) under ``title`` as an aligned table of ``columns``: ``(key, header, format)``."""
    cells = [[h for _, h, _ in columns]]
    for r in rows:
        cells.append(["-" if r.get(k) is None else format(r[k], f) for k, _, f in columns])
    widths = [max(len(row[j]) for row in cells) for j in range(len(columns))]
    print(f"\n{title}")
    for row in cells:
        print("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths))))


def rates(row_count, key_count, row_bytes, seconds):
    """keys/s, rows/s and GB/s of lookup plus update: each unique row read and written once, whole."""
    return {"keys/s": key_count / seconds, "rows/s": row_count / seconds,
            "GB/s": 2 * row_count * row_bytes / seconds / 1e9}


def gib(nbytes):
    return nbytes / 2 ** 30


def pow2_at_least(n):
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))
