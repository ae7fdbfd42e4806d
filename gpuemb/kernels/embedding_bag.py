"""Embedding lookup by slot, with optional pooling of multi-hot bags, and its sparse, deterministic backward.

Rows are looked up by slot: the row index in a table ``[rows, D]`` (the embedding store maps feature IDs to
slots before this op). Without ``offsets`` each slot yields one row, ``[N, D]`` (``gather_rows``). With CSR-style
``offsets [B+1]`` into the flat ``slots [N]``, bag b is ``slots[offsets[b]:offsets[b+1]]`` and its rows are summed,
averaged or maxed element-wise (``mode="sum"|"mean"|"max"``) into ``[B, D]``; an empty bag gives zeros (as in
PyTorch and TorchRec). ``weights [N]``, one per slot, make the sum a weighted sum (``per_sample_weights`` in torch);
like torch, they are refused with mean and max.

The backward never builds a table-sized gradient. It returns ``(unique_slots [U], summed_row_grads [U, D])``, the
slots in ascending order. The sum over duplicate slots is sort-based: a stable argsort of the slots, then a
segment sum over each run of equal slots, adding the runs' gradients in their original order. No float atomics,
so two runs agree bit for bit, on either device (and the CPU and a GPU agree bit for bit, except for a weighted
sum: NVVM fuses its multiply and add into one FMA, so there they agree to rounding).

Max pooling routes each output element's gradient to the one row that held the max: ``embedding_bag_max`` returns
the flat position in ``slots`` of that row, ``argmax [B, D]`` (int32, -1 for an empty bag; ties go to the first
position in the bag), and the backward is the same segment sum over the runs, adding only the (position, column)
pairs that the argmax names. A weighted sum's slot k takes ``weights[k] · gy[bag]``; the weights' own gradient,
``<row, gy[bag]>`` per slot, is ``embedding_bag_weight_grad``, for callers whose weights are trained.

- ``*_ref``: NumPy (``np.add.at``, which also adds in index order).
- ``*_cpu``: numba, parallel over bags (forward) or runs (backward), explicit loops over D. Both directions are
  one segment sum of indexed rows (weighted or not), so one kernel serves both; max pooling has its own forward,
  and its backward is the segment sum restricted to the argmax's (position, column) pairs.
- ``*_cuda``: the same with one thread per output element (bag or run, column), so a warp reads neighbouring
  columns of a row; the segment sum, its weights and max's routing are settings of one kernel.
  The sort and the run boundaries are array calls (``xp.argsort``), the same code on either device.
  A very hot slot makes one long run and so one slow thread; splitting long runs is left for when it shows.
"""
import numba
import numpy as np
from numba import cuda

from gpuemb.autograd import Function
from gpuemb.autograd.backend import aligned_empty, get_array_module, is_device_array

from .gather import gather_rows_cpu, gather_rows_cuda
from gpuemb.autograd.launch import kernel, over

MODES = ("sum", "mean", "max")


def _bag_grads(gy, offsets, mode):
    """The gradient each slot of a bag receives, ``[B, D]``: gy / bag size for mean, gy itself otherwise (a max's
    routing and a sum's weights are applied per slot, by the segment sum).

    Dividing here, in gy's dtype, keeps every implementation adding the very same numbers.
    """
    if mode != "mean":
        return gy
    xp = get_array_module(gy)
    sizes = xp.maximum(offsets[1:] - offsets[:-1], 1).astype(gy.dtype)
    return gy / sizes[:, None]


def _row_offsets(offsets, slots):
    """Without pooling, every slot is a bag of one (on the slots' device)."""
    return get_array_module(slots).arange(slots.size + 1) if offsets is None else offsets


def _bag_of(offsets, n):
    """The bag of each of the ``n`` flat slot positions, ``[N]``."""
    xp = get_array_module(offsets)
    return xp.searchsorted(offsets, xp.arange(n), side="right") - 1


def _runs(slots, offsets, n, n_slots=None):
    """The backward's segment sum: unique slots, the bag each sorted slot takes its gradient from, run bounds, and
    the stable sort order (the flat position of each sorted slot: a max's routing and a sum's weights need it).

    The bounds ``[U+1]`` delimit each run of equal slots in the stable sort order. ``n_slots``: the slots are
    known to be among ``0..n_slots-1`` (the store's positions among a batch's unique keys), so the runs' starts
    are found by a search, and nothing is read back (a mask's compaction would be). A position no slot takes (a
    fixed-size unique's padding) gets an empty run: a zero gradient.
    """
    xp = get_array_module(slots)
    order = xp.argsort(slots, kind="stable")
    ordered = slots[order]
    if n_slots is not None:
        starts = xp.searchsorted(ordered, xp.arange(n_slots), side="left")
        bounds = xp.concatenate([starts, xp.full(1, n, dtype=starts.dtype)])
        return xp.arange(n_slots), _bag_of(offsets, n)[order], bounds, order
    starts = xp.flatnonzero(xp.concatenate([xp.ones(min(1, n), dtype=bool), ordered[1:] != ordered[:-1]]))
    bounds = xp.concatenate([starts, xp.full(1, n, dtype=starts.dtype)])  # no upload
    return ordered[starts], _bag_of(offsets, n)[order], bounds, order


def _no_weights(like):
    """The kernels' stand-in for ``weights=None``: an empty array (numba compiles one signature, not two)."""
    return get_array_module(like).empty(0, dtype=like.dtype)


# -- reference ---------------------------------------------------------------------------------------------------
def embedding_bag_ref(table, slots, offsets=None, mode="sum", weights=None):
    """``table[slots]`` ``[N, D]``, or with ``offsets [B+1]`` each bag's rows pooled by ``mode`` into ``[B, D]``,
    each row scaled by its ``weights [N]`` first when given."""
    if offsets is None:
        return table[slots]
    if mode == "max":
        return embedding_bag_max_ref(table, slots, offsets)[0]
    out = np.zeros((offsets.size - 1, table.shape[1]), dtype=table.dtype)
    for b in range(offsets.size - 1):
        rows = table[slots[offsets[b]:offsets[b + 1]]]
        if weights is not None:
            rows = rows * weights[offsets[b]:offsets[b + 1], None].astype(table.dtype)
        if rows.shape[0]:
            out[b] = rows.sum(axis=0) if mode == "sum" else rows.mean(axis=0)
    return out


def embedding_bag_max_ref(table, slots, offsets):
    """``(out [B, D], argmax [B, D])``: each bag's element-wise max, and the flat position in ``slots`` of the row
    that holds it (int32; the first such position on a tie, -1 for an empty bag, whose output is zeros)."""
    out = np.zeros((offsets.size - 1, table.shape[1]), dtype=table.dtype)
    argmax = np.full(out.shape, -1, np.int32)
    for b in range(offsets.size - 1):
        rows = table[slots[offsets[b]:offsets[b + 1]]]
        if rows.shape[0]:
            out[b], argmax[b] = rows.max(axis=0), offsets[b] + rows.argmax(axis=0)  # argmax: the first maximum
    return out, argmax


def embedding_bag_backward_ref(gy, slots, offsets=None, mode="sum", weights=None, argmax=None):
    """``(unique_slots [U], summed_row_grads [U, D])`` from the output gradient ``gy`` (``[N, D]`` or ``[B, D]``);
    a weighted sum needs its ``weights [N]``, a max its forward's ``argmax [B, D]``."""
    offsets = _row_offsets(offsets, slots)
    bag = _bag_of(offsets, slots.size)
    per_slot = _bag_grads(gy, offsets, mode)[bag]
    if weights is not None:
        per_slot = per_slot * weights[:, None].astype(gy.dtype)
    if argmax is not None:  # only the positions that held their bag's max, column by column
        per_slot = np.where(argmax[bag] == np.arange(slots.size)[:, None], per_slot, 0)
    unique, inverse = np.unique(slots, return_inverse=True)
    summed = np.zeros((unique.size, gy.shape[1]), dtype=gy.dtype)
    np.add.at(summed, inverse, per_slot)
    return unique, summed


def embedding_bag_weight_grad_ref(table, slots, offsets, gy):
    """The gradient of a weighted sum with respect to its ``weights [N]``: ``<table[slots[k]], gy[bag of k]>``."""
    return (table[slots] * gy[_bag_of(offsets, slots.size)]).sum(axis=1)


# -- CPU ---------------------------------------------------------------------------------------------------------
# Both directions are one op: out[u] = the rows src[index[k]] for k in [bounds[u], bounds[u+1]), each times
# weight[k] where weights are given (not empty), added in order of k, divided by their count when ``mean``.
# Forward: src = table, index = slots, bounds = offsets. Backward: src = the bags' gradients, index = the bag of
# each sorted slot, weight = the sorted slots' weights, bounds = the runs of equal slots.
@numba.njit(parallel=True, cache=True)
def _segment_rows_cpu(src, index, weight, bounds, mean, out):
    D = src.shape[1]
    weighted = weight.shape[0] > 0
    for u in numba.prange(bounds.shape[0] - 1):
        for d in range(D):
            out[u, d] = 0
        for k in range(bounds[u], bounds[u + 1]):
            row = index[k]
            if weighted:  # the product rounds in src's dtype before the add, as the reference's does
                w = weight[k]
                for d in range(D):
                    out[u, d] += src[row, d] * w
            else:
                for d in range(D):
                    out[u, d] += src[row, d]
        size = bounds[u + 1] - bounds[u]
        if mean and size > 1:
            for d in range(D):
                out[u, d] /= size
    return out


@numba.njit(parallel=True, cache=True)
def _segment_max_cpu(src, index, bounds, out, argmax):
    """Max pooling: out[u, d] = the max of src[index[k], d] over the segment, argmax[u, d] = its first k."""
    D = src.shape[1]
    for u in numba.prange(bounds.shape[0] - 1):
        for d in range(D):
            out[u, d] = 0
            argmax[u, d] = -1
        for k in range(bounds[u], bounds[u + 1]):
            row = index[k]
            for d in range(D):
                if argmax[u, d] < 0 or src[row, d] > out[u, d]:  # strictly greater: a tie keeps the first
                    out[u, d] = src[row, d]
                    argmax[u, d] = k
    return out, argmax


@numba.njit(parallel=True, cache=True)
def _segment_routed_cpu(src, index, order, argmax, bounds, out):
    """Max pooling's backward: the segment sum of ``_segment_rows_cpu``, adding src[index[k], d] only where the
    sorted slot's flat position order[k] is the one that held its bag's max in column d."""
    D = src.shape[1]
    for u in numba.prange(bounds.shape[0] - 1):
        for d in range(D):
            out[u, d] = 0
        for k in range(bounds[u], bounds[u + 1]):
            bag, position = index[k], order[k]
            for d in range(D):
                if argmax[bag, d] == position:
                    out[u, d] += src[bag, d]
    return out


@numba.njit(parallel=True, cache=True)
def _row_dots_cpu(table, slots, bag, gy, out):
    """out[k] = <table[slots[k]], gy[bag[k]]>: a weighted sum's gradient with respect to weight k."""
    for k in numba.prange(slots.shape[0]):
        out[k] = 0
        for d in range(table.shape[1]):
            out[k] += table[slots[k], d] * gy[bag[k], d]
    return out


def embedding_bag_cpu(table, slots, offsets=None, mode="sum", weights=None):
    if offsets is None:
        return gather_rows_cpu(table, slots)
    if mode == "max":
        return embedding_bag_max_cpu(table, slots, offsets)[0]
    out = aligned_empty((offsets.size - 1, table.shape[1]), table.dtype)  # handed to other stacks by DLPack
    weights = _no_weights(table) if weights is None else weights
    return _segment_rows_cpu(table, slots, weights, offsets, mode == "mean", out)


def embedding_bag_max_cpu(table, slots, offsets):
    out = aligned_empty((offsets.size - 1, table.shape[1]), table.dtype)
    return _segment_max_cpu(table, slots, offsets, out, np.empty(out.shape, np.int32))


@numba.njit(cache=True)
def counting_order(slots, counts):
    """The stable sort order of ``slots`` whose values count ``counts`` (``np.bincount(slots)``): one pass, no
    comparisons."""
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
    order = counting_order(slots, counts)
    unique = np.flatnonzero(counts)
    bounds = np.zeros(unique.size + 1, np.int64)
    np.cumsum(counts[unique], out=bounds[1:])
    if not pooled:  # every slot is its own bag
        return unique, order, bounds, order
    return unique, _bag_of(offsets, n)[order], bounds, order


def embedding_bag_backward_cpu(gy, slots, offsets=None, mode="sum", weights=None, argmax=None, n_slots=None):
    pooled = offsets is not None
    offsets = _row_offsets(offsets, slots)
    unique, bag, bounds, order = _runs_cpu(slots, offsets, slots.size, pooled)
    out = np.empty((unique.size, gy.shape[1]), dtype=gy.dtype)
    src = np.ascontiguousarray(_bag_grads(gy, offsets, mode))
    if argmax is not None:
        return unique, _segment_routed_cpu(src, bag, order, argmax, bounds, out)
    weight = _no_weights(gy) if weights is None else weights[order]
    return unique, _segment_rows_cpu(src, bag, weight, bounds, False, out)


def embedding_bag_weight_grad_cpu(table, slots, offsets, gy):
    out = np.empty(slots.size, dtype=gy.dtype)
    return _row_dots_cpu(table, slots, _bag_of(offsets, slots.size), gy, out)


# -- CUDA --------------------------------------------------------------------------------------------------------
# One thread per output element. NVVM fuses a multiply and an add into one FMA, rounded once, so on a GPU a
# weighted sum agrees with the CPU's to rounding, not bit for bit (each device is still deterministic); the
# simulator rounds the product first, as the CPU does.
@kernel
def _segment_rows_kernel(src, index, weight, route, argmax, bounds, mean, zero, out):
    D = src.shape[1]
    for k in range(cuda.grid(1), out.shape[0] * D, cuda.gridsize(1)):
        u = k // D
        d = k - u * D
        s = zero
        weighted, routed = weight.shape[0] > 0, route.shape[0] > 0
        for i in range(bounds[u], bounds[u + 1]):
            if routed and argmax[index[i], d] != route[i]:
                continue  # max pooling's backward: this position did not hold its bag's max in column d
            if weighted:
                s += src[index[i], d] * weight[i]
            else:
                s += src[index[i], d]
        size = bounds[u + 1] - bounds[u]
        out[u, d] = s / size if mean and size > 1 else s


@kernel
def _segment_max_kernel(src, index, bounds, zero, out, argmax):
    D = src.shape[1]
    for k in range(cuda.grid(1), out.shape[0] * D, cuda.gridsize(1)):
        u = k // D
        d = k - u * D
        best = zero
        at = -1
        for i in range(bounds[u], bounds[u + 1]):
            v = src[index[i], d]
            if at < 0 or v > best:  # strictly greater: a tie keeps the first position
                best = v
                at = i
        out[u, d] = best
        argmax[u, d] = at


@kernel
def _row_dots_kernel(table, slots, bag, gy, zero, out):
    for k in range(cuda.grid(1), slots.shape[0], cuda.gridsize(1)):
        s = zero
        for d in range(table.shape[1]):
            s += table[slots[k], d] * gy[bag[k], d]
        out[k] = s


def _launch(fn, n, like, *args):
    """Launch the kernel ``fn`` on ``args`` over ``n`` items (``launch.over``), on the stream of ``like``'s device."""
    fn[over(n, like)](*args)


def _segment_rows_cuda(src, index, weight, bounds, mean, route=None, argmax=None):
    """The segment sum of ``_segment_rows_cpu``; with ``route`` and ``argmax``, max pooling's backward, which
    adds src[index[i], d] only where the flat position route[i] held its bag's max in column d."""
    xp = get_array_module(src)
    if route is None:
        route, argmax = xp.empty(0, np.int64), xp.empty((0, 0), np.int32)
    out = xp.empty((bounds.size - 1, src.shape[1]), dtype=src.dtype)
    _launch(_segment_rows_kernel, out.size, src, src, index, weight, route, argmax, bounds, mean, src.dtype.type(0),
            out)
    return out


def embedding_bag_cuda(table, slots, offsets=None, mode="sum", weights=None):
    if offsets is None:
        return gather_rows_cuda(table, slots)
    if mode == "max":
        return embedding_bag_max_cuda(table, slots, offsets)[0]
    weights = _no_weights(table) if weights is None else weights
    return _segment_rows_cuda(table, slots, weights, offsets, mode == "mean")


def embedding_bag_max_cuda(table, slots, offsets):
    xp = get_array_module(table)
    out = xp.empty((offsets.size - 1, table.shape[1]), dtype=table.dtype)
    argmax = xp.empty(out.shape, dtype=np.int32)
    _launch(_segment_max_kernel, out.size, table, table, slots, offsets, table.dtype.type(0), out, argmax)
    return out, argmax


def embedding_bag_backward_cuda(gy, slots, offsets=None, mode="sum", weights=None, argmax=None, n_slots=None):
    offsets = _row_offsets(offsets, slots)
    unique, bag, bounds, order = _runs(slots, offsets, slots.size, n_slots)
    weight = _no_weights(gy) if weights is None else weights[order]
    route = None if argmax is None else order
    return unique, _segment_rows_cuda(_bag_grads(gy, offsets, mode), bag, weight, bounds, False, route, argmax)


def embedding_bag_weight_grad_cuda(table, slots, offsets, gy):
    out = get_array_module(gy).empty(slots.size, dtype=gy.dtype)
    _launch(_row_dots_kernel, slots.size, gy, table, slots, _bag_of(offsets, slots.size), gy, gy.dtype.type(0), out)
    return out


# -- dispatch and autograd ---------------------------------------------------------------------------------------
def _check(slots, offsets, mode, rows=None, weights=None):
    """Shapes and types always; the values of host slots and offsets only. Checking device values reads them
    back and waits for the stream, so on the device they are in range by construction: the store's slots are
    positions among a batch's unique keys and its offsets are the caller's, checked where they were made."""
    if mode not in MODES:
        raise ValueError(f"embedding_bag: mode={mode!r}; use one of {', '.join(MODES)}")
    if slots.ndim != 1 or slots.dtype.kind not in "iu":
        raise TypeError(f"embedding_bag: slots must be 1-D integers, got {slots.dtype} of shape {slots.shape}")
    if weights is not None and (offsets is None or mode != "sum"):
        raise ValueError(f"embedding_bag: per-sample weights make a weighted sum, so they need offsets [B+1] and "
                         f"mode='sum' (as torch's per_sample_weights); got mode={mode!r}"
                         + ("" if offsets is not None else " without offsets"))
    if weights is not None and weights.shape != slots.shape:
        raise ValueError(f"embedding_bag: weights of shape {weights.shape}; want [{slots.size}], one per slot")
    if mode == "max" and slots.size > np.iinfo(np.int32).max:
        raise ValueError(f"embedding_bag: max pooling keeps int32 positions, so at most 2**31 - 1 slots, got "
                         f"{slots.size}; split the batch")
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


def _check_grad(gy, slots, offsets, caller):
    rows = slots.size if offsets is None else offsets.size - 1
    if gy.ndim != 2 or gy.shape[0] != rows:
        raise ValueError(f"{caller}: gradient of shape {gy.shape}; want [{rows}, D], one row per "
                         + ("slot" if offsets is None else "bag"))


def _in_dtype_of(weights, like):
    """Weights in the rows' dtype, so every implementation multiplies the very same numbers."""
    return None if weights is None else weights.astype(like.dtype, copy=False)


def embedding_bag(table, slots, offsets=None, mode="sum", weights=None):
    """Rows ``table [rows, D]`` at ``slots [N]``: ``[N, D]``, or with ``offsets [B+1]`` pooled per bag, ``[B, D]``;
    ``weights [N]`` (mode "sum" only) scale each slot's row."""
    _check(slots, offsets, mode, table.shape[0], weights)
    impl = embedding_bag_cuda if is_device_array(table) else embedding_bag_cpu
    return impl(table, slots, offsets, mode, _in_dtype_of(weights, table))


def embedding_bag_max(table, slots, offsets):
    """Max pooling, ``(out [B, D], argmax [B, D])``: argmax is what the backward needs, the flat position in
    ``slots`` of the row that holds each max (int32; the first in the bag on a tie, -1 in an empty bag)."""
    if offsets is None:
        raise ValueError("embedding_bag_max: max pooling needs bags; pass offsets [B+1]")
    _check(slots, offsets, "max", table.shape[0])
    impl = embedding_bag_max_cuda if is_device_array(table) else embedding_bag_max_cpu
    return impl(table, slots, offsets)


def embedding_bag_backward(gy, slots, offsets=None, mode="sum", weights=None, argmax=None, n_slots=None):
    """``(unique_slots [U], summed_row_grads [U, D])`` for the output gradient ``gy``; deterministic, no atomics.

    A weighted sum takes its forward's ``weights [N]``, a pooled max its forward's ``argmax [B, D]``
    (``embedding_bag_max``): each output element's gradient goes to the one slot whose row held the max.
    ``n_slots``: the caller vouches that the slots lie in ``0..n_slots-1``, so the unique slots are known
    without a read of the device: all of them, those no slot takes with a zero gradient (the store's positions
    among unique keys, padded to a fixed size, are)."""
    _check(slots, offsets, mode, weights=weights)
    _check_grad(gy, slots, offsets, "embedding_bag_backward")
    routed = mode == "max" and offsets is not None
    if (argmax is not None) != routed or (routed and argmax.shape != gy.shape):
        raise ValueError(f"embedding_bag_backward: a pooled max, and only it, takes the argmax [B, D] = "
                         f"{list(gy.shape)} of embedding_bag_max; got mode={mode!r} and argmax of shape "
                         f"{None if argmax is None else argmax.shape}")
    impl = embedding_bag_backward_cuda if is_device_array(gy) else embedding_bag_backward_cpu
    return impl(gy, slots, offsets, mode, _in_dtype_of(weights, gy), argmax, n_slots)


def embedding_bag_weight_grad(table, slots, offsets, gy):
    """The gradient of a weighted sum with respect to its weights, ``[N]``: ``<table[slots[k]], gy[bag of k]>``.

    For callers that train the weights (FBGEMM's and TorchRec's weighted features); the store's lookups treat
    weights as data and never call it."""
    _check(slots, offsets, "sum", table.shape[0])
    _check_grad(gy, slots, offsets, "embedding_bag_weight_grad")
    impl = embedding_bag_weight_grad_cuda if is_device_array(gy) else embedding_bag_weight_grad_cpu
    return impl(table, slots, _row_offsets(offsets, slots), gy)


class EmbeddingBagFunction(Function):
    """Lookup (and pooling) whose backward hands ``(unique_slots, summed_row_grads)`` to ``on_grad``.

    ``EmbeddingBagFunction(slots, offsets, mode, on_grad, weights).apply(table)``, where ``table`` is the Tensor
    of the rows that the slots index (a device slab or cache buffer of the store) with ``requires_grad=True`` so
    the tape records the op. The table's ``.grad`` stays None: the row gradients go to ``on_grad`` (the store's
    fused row update), so nothing table-sized is ever built. Applying it to the table, not to already gathered
    rows, keeps the gather inside the op and the slots (not N copied rows) as all the backward keeps; a max
    pooling also keeps its argmax ``[B, D]`` (int32). ``weights`` are data: no gradient flows to them here
    (``embedding_bag_weight_grad`` computes one for callers that train them).
    """

    def __init__(self, slots, offsets=None, mode="sum", on_grad=None, weights=None, n_slots=None):
        if not callable(on_grad):
            raise TypeError("EmbeddingBagFunction: on_grad must be a callable(unique_slots, summed_row_grads)")
        self.slots, self.offsets, self.mode, self.on_grad = slots, offsets, mode, on_grad
        self.weights, self.argmax, self.n_slots = weights, None, n_slots

    def forward(self, table):
        if self.mode == "max" and self.offsets is not None:  # the backward routes by where each max came from
            out, self.argmax = embedding_bag_max(table, self.slots, self.offsets)
            return out
        return embedding_bag(table, self.slots, self.offsets, self.mode, self.weights)

    def backward(self, gy):
        self.on_grad(*embedding_bag_backward(gy, self.slots, self.offsets, self.mode, self.weights, self.argmax,
                                             self.n_slots))
        return None
