"""Embedding lookup by slot, with optional pooling of multi-hot bags, and its sparse, deterministic backward.

Rows are looked up by slot: the row index in a table ``[rows, D]`` (the embedding store maps feature IDs to
slots before this op). Without ``offsets`` each slot yields one row, ``[N, D]`` (``gather_rows``). With CSR-style
``offsets [B+1]`` into the flat ``slots [N]``, bag b is ``slots[offsets[b]:offsets[b+1]]`` and its rows are summed
or averaged (``mode="sum"|"mean"``) into ``[B, D]``; an empty bag gives zeros.

The backward never builds a table-sized gradient. It returns ``(unique_slots [U], summed_row_grads [U, D])``, the
slots in ascending order. The sum over duplicate slots is sort-based: a stable argsort of the slots, then a
segment sum over each run of equal slots, adding the runs' gradients in their original order. No float atomics,
so two runs agree bit for bit, on either device.

- ``*_ref``: NumPy (``np.add.at``, which also adds in index order).
- ``*_cpu``: numba, parallel over bags (forward) or runs (backward), explicit loops over D. Both directions are
  one segment sum of indexed rows, so one kernel serves both.
- ``*_cuda``: the same segment sum with one thread per output element (bag or run, column), so a warp reads
  neighbouring columns of a row.
  The sort and the run boundaries are array calls (``xp.argsort``), the same code on either device.
  A very hot slot makes one long run and so one slow thread; splitting long runs is left for when it shows.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import Function
from gpuemb.autograd.backend import aligned_empty, get_array_module, is_device_array

from .gather import gather_rows_cpu, gather_rows_cuda
from gpuemb.autograd.launch import blocks_for, kernel, stream_for

MODES = ("sum", "mean")


def _bag_grads(gy, offsets, mode):
    """The gradient each slot of a bag receives, ``[B, D]``: gy itself for sum, gy / bag size for mean.

    Dividing here, in gy's dtype, keeps every implementation adding the very same numbers.
    """
    if mode == "sum":
        return gy
    xp = get_array_module(gy)
    sizes = xp.maximum(offsets[1:] - offsets[:-1], 1).astype(gy.dtype)
    return gy / sizes[:, None]


def _row_offsets(offsets, slots):
    """Without pooling, every slot is a bag of one (on the slots' device)."""
    return get_array_module(slots).arange(slots.size + 1) if offsets is None else offsets


def _runs(slots, offsets, n):
    """The backward's segment sum: unique slots, the bag each sorted slot takes its gradient from, run bounds.

    The bounds ``[U+1]`` delimit each run of equal slots in the stable sort order.
    """
    xp = get_array_module(slots)
    order = xp.argsort(slots, kind="stable")
    ordered = slots[order]
    starts = xp.flatnonzero(xp.concatenate([xp.ones(min(1, n), dtype=bool), ordered[1:] != ordered[:-1]]))
    bag = xp.searchsorted(offsets, xp.arange(n), side="right") - 1  # the bag of each flat slot position
    return ordered[starts], bag[order], xp.concatenate([starts, xp.full(1, n, dtype=starts.dtype)])  # no upload


# -- reference ---------------------------------------------------------------------------------------------------
def embedding_bag_ref(table, slots, offsets=None, mode="sum"):
    """``table[slots]`` ``[N, D]``, or with ``offsets [B+1]`` each bag's rows pooled by ``mode`` into ``[B, D]``."""
    if offsets is None:
        return table[slots]
    out = np.zeros((offsets.size - 1, table.shape[1]), dtype=table.dtype)
    for b in range(offsets.size - 1):
        rows = table[slots[offsets[b]:offsets[b + 1]]]
        if rows.shape[0]:
            out[b] = rows.sum(axis=0) if mode == "sum" else rows.mean(axis=0)
    return out


def embedding_bag_backward_ref(gy, slots, offsets=None, mode="sum"):
    """``(unique_slots [U], summed_row_grads [U, D])`` from the output gradient ``gy`` (``[N, D]`` or ``[B, D]``)."""
    offsets = _row_offsets(offsets, slots)
    per_slot = _bag_grads(gy, offsets, mode)[np.searchsorted(offsets, np.arange(slots.size), side="right") - 1]
    unique, inverse = np.unique(slots, return_inverse=True)
    summed = np.zeros((unique.size, gy.shape[1]), dtype=gy.dtype)
    np.add.at(summed, inverse, per_slot)
    return unique, summed


# -- CPU ---------------------------------------------------------------------------------------------------------
# Both directions are one op: out[u] = the rows src[index[k]] for k in [bounds[u], bounds[u+1]), added in order
# of k, divided by their count when ``mean``. Forward: src = table, index = slots, bounds = offsets. Backward:
# src = the bags' gradients, index = the bag of each sorted slot, bounds = the runs of equal slots.
@numba.njit(parallel=True, cache=True)
def _segment_rows_cpu(src, index, bounds, mean, out):
    D = src.shape[1]
    for u in numba.prange(bounds.shape[0] - 1):
        for d in range(D):
            out[u, d] = 0
        for k in range(bounds[u], bounds[u + 1]):
            row = index[k]
            for d in range(D):
                out[u, d] += src[row, d]
        size = bounds[u + 1] - bounds[u]
        if mean and size > 1:
            for d in range(D):
                out[u, d] /= size
    return out


def embedding_bag_cpu(table, slots, offsets=None, mode="sum"):
    if offsets is None:
        return gather_rows_cpu(table, slots)
    out = aligned_empty((offsets.size - 1, table.shape[1]), table.dtype)  # handed to other stacks by DLPack
    return _segment_rows_cpu(table, slots, offsets, mode == "mean", out)


@numba.njit(cache=True)
def _counting_order(slots, counts):
    """The stable sort order of ``slots`` whose values count ``counts``: one pass, no comparisons."""
    pos = np.empty(counts.size, np.int64)
    total = 0
    for v in range(counts.size):
        pos[v] = total
        total += counts[v]
    order = np.empty(slots.size, np.int64)
    for k in range(slots.size):
        order[pos[slots[k]]] = k
        pos[slots[k]] += 1
    return order


def _runs_cpu(slots, offsets, n, pooled):
    """``_runs`` for NumPy: a table's slots are positions among the batch's unique keys, so a counting sort
    replaces the comparison sort (3 ms of a 53k-key batch) and gives the same stable order, hence the same sums
    bit for bit. Values spread far wider than the batch fall back to the sort."""
    if not n or slots.min() < 0 or slots.max() > 4 * n + 1024:
        return _runs(slots, offsets, n)
    counts = np.bincount(slots)
    order = _counting_order(slots, counts)
    unique = np.flatnonzero(counts)
    bounds = np.zeros(unique.size + 1, np.int64)
    np.cumsum(counts[unique], out=bounds[1:])
    if not pooled:  # every slot is its own bag
        return unique, order, bounds
    bag = np.searchsorted(offsets, np.arange(n), side="right") - 1
    return unique, bag[order], bounds


def embedding_bag_backward_cpu(gy, slots, offsets=None, mode="sum"):
    pooled = offsets is not None
    offsets = _row_offsets(offsets, slots)
    unique, bag, bounds = _runs_cpu(slots, offsets, slots.size, pooled)
    out = np.empty((unique.size, gy.shape[1]), dtype=gy.dtype)
    return unique, _segment_rows_cpu(np.ascontiguousarray(_bag_grads(gy, offsets, mode)), bag, bounds, False, out)


# -- CUDA --------------------------------------------------------------------------------------------------------
@kernel
def _segment_rows_kernel(src, index, bounds, mean, zero, out):
    k = cuda.grid(1)
    D = src.shape[1]
    if k < out.shape[0] * D:
        u = k // D
        d = k - u * D
        s = zero
        for i in range(bounds[u], bounds[u + 1]):
            s += src[index[i], d]
        size = bounds[u + 1] - bounds[u]
        out[u, d] = s / size if mean and size > 1 else s


def _segment_rows_cuda(src, index, bounds, mean):
    out = get_array_module(src).empty((bounds.size - 1, src.shape[1]), dtype=src.dtype)
    _segment_rows_kernel[blocks_for(out.size), 256, stream_for(src)](src, index, bounds, mean, src.dtype.type(0),
                                                                     out)
    return out


def embedding_bag_cuda(table, slots, offsets=None, mode="sum"):
    if offsets is None:
        return gather_rows_cuda(table, slots)
    return _segment_rows_cuda(table, slots, offsets, mode == "mean")


def embedding_bag_backward_cuda(gy, slots, offsets=None, mode="sum"):
    offsets = _row_offsets(offsets, slots)
    unique, bag, bounds = _runs(slots, offsets, slots.size)
    return unique, _segment_rows_cuda(_bag_grads(gy, offsets, mode), bag, bounds, False)


# -- dispatch and autograd ---------------------------------------------------------------------------------------
def _check(slots, offsets, mode, rows=None):
    """Shapes and types always; the values of host slots and offsets only. Checking device values reads them
    back and waits for the stream, so on the device they are in range by construction: the store's slots are
    positions among a batch's unique keys and its offsets are the caller's, checked where they were made."""
    if mode not in MODES:
        raise ValueError(f"embedding_bag: mode={mode!r}; use one of {', '.join(MODES)}")
    if slots.ndim != 1 or slots.dtype.kind not in "iu":
        raise TypeError(f"embedding_bag: slots must be 1-D integers, got {slots.dtype} of shape {slots.shape}")
    if is_device_array(slots) or (offsets is not None and is_device_array(offsets)):
        if offsets is not None and offsets.ndim != 1:
            raise ValueError(f"embedding_bag: offsets must be [B+1], got shape {offsets.shape}")
        return
    if rows is not None and slots.size and (int(slots.min()) < 0 or int(slots.max()) >= rows):
        raise IndexError(f"embedding_bag: slots span [{int(slots.min())}, {int(slots.max())}], "
                         f"outside the table's {rows} rows")
    if offsets is None:
        return
    if offsets.ndim != 1 or offsets.size < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != slots.size:
        raise ValueError(f"embedding_bag: offsets must be [B+1] from 0 to len(slots) = {slots.size}, "
                         f"got shape {offsets.shape}" + (f" from {int(offsets[0])} to {int(offsets[-1])}"
                                                          if offsets.size else ""))
    if offsets.size > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError("embedding_bag: offsets must not decrease (bag b is slots[offsets[b]:offsets[b+1]])")


def embedding_bag(table, slots, offsets=None, mode="sum"):
    """Rows ``table [rows, D]`` at ``slots [N]``: ``[N, D]``, or with ``offsets [B+1]`` pooled per bag, ``[B, D]``."""
    _check(slots, offsets, mode, table.shape[0])
    impl = embedding_bag_cuda if is_device_array(table) else embedding_bag_cpu
    return impl(table, slots, offsets, mode)


def embedding_bag_backward(gy, slots, offsets=None, mode="sum"):
    """``(unique_slots [U], summed_row_grads [U, D])`` for the output gradient ``gy``; deterministic, no atomics."""
    _check(slots, offsets, mode)
    rows = slots.size if offsets is None else offsets.size - 1
    if gy.ndim != 2 or gy.shape[0] != rows:
        raise ValueError(f"embedding_bag_backward: gradient of shape {gy.shape}; want [{rows}, D], one row per "
                         + ("slot" if offsets is None else "bag"))
    impl = embedding_bag_backward_cuda if is_device_array(gy) else embedding_bag_backward_cpu
    return impl(gy, slots, offsets, mode)


class EmbeddingBagFunction(Function):
    """Lookup (and pooling) whose backward hands ``(unique_slots, summed_row_grads)`` to ``on_grad``.

    ``EmbeddingBagFunction(slots, offsets, mode, on_grad).apply(table)``, where ``table`` is the Tensor of the
    rows that the slots index (a device slab or cache buffer of the store) with ``requires_grad=True`` so the
    tape records the op. The table's ``.grad`` stays None: the row gradients go to ``on_grad`` (the store's fused
    row update), so nothing table-sized is ever built. Applying it to the table, not to already gathered rows,
    keeps the gather inside the op and the slots (not N copied rows) as all the backward keeps.
    """

    def __init__(self, slots, offsets=None, mode="sum", on_grad=None):
        if not callable(on_grad):
            raise TypeError("EmbeddingBagFunction: on_grad must be a callable(unique_slots, summed_row_grads)")
        self.slots, self.offsets, self.mode, self.on_grad = slots, offsets, mode, on_grad

    def forward(self, table):
        return embedding_bag(table, self.slots, self.offsets, self.mode)

    def backward(self, gy):
        self.on_grad(*embedding_bag_backward(gy, self.slots, self.offsets, self.mode))
        return None
