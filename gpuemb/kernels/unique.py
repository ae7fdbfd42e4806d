"""A batch's distinct keys, sorted, and each key's index among them: what every lookup of the store starts with.

- ``unique_keys_ref``: the definition, ``np.unique(keys, return_inverse=True)``;
- ``unique_keys_cpu``: numba. One pass over the keys through an open-addressing hash table (linear probing,
  Fibonacci hashing, at most half full) collects the distinct keys in first-seen order and each key's index
  among them; then only the U distinct keys are sorted and the indices renumbered by rank. A batch repeats its
  hot keys many times, so U is far below N: on a quiet 2-core CPU (``python tools/bench_ops.py --filter unique``),
  877k multi-hot keys of 4096 rows (MLPerf's hotness, 16k distinct) take 2.7 ms against 55 ms for a sort of all N
  (``backend.unique``) and 10.9 ms for ``torch.unique``; a single-hot batch (106k keys) 0.62 ms against 5.3 and
  2.0 ms;
- ``first_seen``: the hash table's pass alone, the distinct keys in order of first sight and each key's index, for
  callers that need no order (the distributed route's ``dedup``);
- on a device, ``backend.unique`` (one sort of all N): a GPU sorts 1M keys in well under a millisecond, and a
  hash table with atomics would not give the same order of first sight on every run anyway.
The result is the same array, bit for bit, whichever runs.

``unique_keys_fixed`` is the device's form for a training step, which must not read back how many keys are
distinct (a boolean mask's compaction would): see its docstring.
"""
import numba
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import is_device_array

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def unique_keys_ref(keys):
    return np.unique(keys, return_inverse=True)


@numba.njit(cache=True)
def _first_seen(keys, inverse, bits):
    """The distinct ``keys`` in order of first sight; ``inverse[i]`` gets key i's index among them."""
    mask, shift = np.uint64((1 << bits) - 1), np.uint64(64 - bits)
    table = np.full(1 << bits, -1, np.int32)  # index among the distinct keys, -1: empty
    distinct = np.empty(keys.size, np.int64)
    n = 0
    for i in range(keys.size):
        k = keys[i]
        h = (np.uint64(k) * _GOLDEN) >> shift  # Fibonacci hashing: the product's top bits
        while True:
            j = table[h]
            if j < 0:
                table[h] = n
                distinct[n] = k
                inverse[i] = n
                n += 1
                break
            if distinct[j] == k:
                inverse[i] = j
                break
            h = (h + np.uint64(1)) & mask
    return distinct[:n]


def first_seen(keys):
    """``(distinct [U], inverse [N])`` of a host int64 array ``keys`` (flattened): the distinct keys in order of
    first sight, and each key's index among them. One pass through the hash table, no sort."""
    if keys.size >= 1 << 30:  # the table's int32 entries
        raise ValueError(f"unique_keys: {keys.size} keys in one batch; split the batch below 2**30 keys")
    keys = np.ascontiguousarray(keys, np.int64).ravel()
    inverse = np.empty(keys.size, np.int64)
    bits = max(4, (2 * keys.size).bit_length())  # at least twice the keys: probes stay short
    return _first_seen(keys, inverse, bits), inverse


def unique_keys_cpu(keys):
    distinct, inverse = first_seen(keys)
    order = np.argsort(distinct)
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[inverse]


def unique_keys(keys):
    """``(sorted distinct keys [U], each key's index among them [N])`` of int64 ``keys`` (flattened)."""
    if is_device_array(keys):
        return backend.unique(keys, return_inverse=True)
    return unique_keys_cpu(keys)  # first_seen refuses 2**30 keys or more: its table's entries are int32


def unique_keys_fixed(keys):
    """``(unique [N], inverse [N], count [1], valid [N], source [N])`` of int64 device ``keys`` (flattened), with
    nothing read back: the U distinct keys sorted, then N - U copies of the largest; each key's index among the
    first U; U as a device array; ``valid``: the positions below U; ``source``: the position in ``keys`` of an
    occurrence of each entry (so a copy carries its key's tag, ``EmbeddingTable._unique``).

    A copy of the largest key pads rather than a reserved value, as every int64 is a legal key (the index keeps
    even its sentinels' keys in side rows); the store sends the padding to slot -1 (``RowLevel.acquire``), and the
    index never claims it (its first occurrence is the real key's, at U - 1). The first U entries and ``inverse``
    equal ``backend.unique``'s, bit for bit."""
    xp = backend.get_array_module(keys)
    keys = keys.ravel()
    n = keys.shape[0]
    order = xp.argsort(keys)
    rank = xp.cumsum(backend.first_of_runs(keys[order])) - 1  # each sorted key's index among the distinct ones
    inverse = xp.empty(n, dtype=np.int64)
    inverse[order] = rank
    at = xp.arange(n)
    # The first sorted position of each distinct key; past U, the search runs off the end: the last (largest) one.
    source = order[xp.minimum(xp.searchsorted(rank, at), n - 1)]
    count = rank[-1:] + 1 if n else xp.zeros(1, np.int64)
    return keys[source], inverse, count, at < count, source
