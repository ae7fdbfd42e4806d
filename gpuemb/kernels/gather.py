"""Gather rows of a table by index, ``out[i, :] = table[idx[i], :]``, and its inverse, the scatter
``table[idx[i], :] = values[i, :]`` (distinct indices).

The simplest kernel of the project, and the pattern the others follow (llm.c's layout):
- ``gather_rows_ref``: the definition, in NumPy;
- ``gather_rows_cpu``: numba, parallel over rows, with an explicit loop over the row's elements
  (docs/design.md, "Kernels": 4 to 6 times faster than ``table[idx]`` on 2 cores; ``out[i, :] = table[j, :]``
  inside numba was 7 times slower);
- ``gather_rows_cuda``: one thread per output element, so neighbouring threads read neighbouring columns of the
  same row and the loads coalesce;
- ``gather_rows``: picks one by array type;
- ``scatter_rows``: the same four for the scatter, which the store writes its rows with (on 2 cores 4 times
  faster than NumPy's ``table[idx] = values``: 0.11 against 0.48 ms for 25,000 rows of 16 float32). Indices
  must be distinct, as in every tier's ``write``: with a repeated one, which of its values lands is not defined.
Indices must lie in ``[0, rows)``. The dispatcher checks host indices once, so the kernels need not; device
indices it does not check, since that reads two values back and waits for the stream: on the device the caller's
indices are in range by construction (the store's slots come from its own allocator, below the tier's rows).
"""
import numba
from numba import cuda

from gpuemb.autograd.backend import aligned_empty, get_array_module, is_device_array

from gpuemb.autograd.launch import kernel, over


def gather_rows_ref(table, idx):
    """``table[idx]`` for a 2-D table and 1-D integer indices."""
    return table[idx]


@numba.njit(parallel=True, cache=True)
def _gather_rows_cpu(table, idx, out):
    D = table.shape[1]
    for i in numba.prange(idx.shape[0]):
        row = idx[i]
        for d in range(D):
            out[i, d] = table[row, d]


def gather_rows_cpu(table, idx):
    out = aligned_empty((idx.shape[0], table.shape[1]), table.dtype)  # handed to other stacks by DLPack
    _gather_rows_cpu(table, idx, out)
    return out


@kernel
def _gather_rows_kernel(table, idx, out):
    D = table.shape[1]
    for k in range(cuda.grid(1), idx.shape[0] * D, cuda.gridsize(1)):
        i = k // D
        d = k - i * D
        out[i, d] = table[idx[i], d]


def gather_rows_cuda(table, idx):
    out = get_array_module(table).empty((idx.shape[0], table.shape[1]), dtype=table.dtype)
    n = idx.shape[0] * table.shape[1]
    _gather_rows_kernel[over(n, table)](table, idx, out)
    return out


def gather_rows(table, idx):
    """Rows ``table[idx]`` of a 2-D table: the CUDA kernel for CuPy arrays, numba for NumPy."""
    if table.ndim != 2 or idx.ndim != 1:
        raise ValueError(f"gather_rows: want a 2-D table and 1-D indices, got shapes {table.shape} and {idx.shape}")
    if not is_device_array(idx) and idx.size and (int(idx.min()) < 0 or int(idx.max()) >= table.shape[0]):
        raise IndexError(f"gather_rows: indices span [{int(idx.min())}, {int(idx.max())}], "
                         f"outside the table's {table.shape[0]} rows")
    return gather_rows_cuda(table, idx) if is_device_array(table) else gather_rows_cpu(table, idx)


def scatter_rows_ref(table, idx, values):
    """``table[idx] = values`` in place, for distinct indices."""
    table[idx] = values


@numba.njit(parallel=True, cache=True)
def _scatter_rows_cpu(table, idx, values):
    D = table.shape[1]
    for i in numba.prange(idx.shape[0]):
        row = idx[i]
        for d in range(D):
            table[row, d] = values[i, d]


def scatter_rows_cpu(table, idx, values):
    _scatter_rows_cpu(table, idx, values)


@kernel
def _scatter_rows_kernel(table, idx, values):
    D = table.shape[1]
    for k in range(cuda.grid(1), idx.shape[0] * D, cuda.gridsize(1)):
        i = k // D
        d = k - i * D
        table[idx[i], d] = values[i, d]


def scatter_rows_cuda(table, idx, values):
    n = idx.shape[0] * table.shape[1]
    if n:
        _scatter_rows_kernel[over(n, table)](table, idx, values)


def scatter_rows(table, idx, values):
    """``table[idx[i]] = values[i]`` in place, for distinct ``idx``: CUDA for CuPy arrays, numba for NumPy."""
    if table.ndim != 2 or idx.ndim != 1 or values.shape != (idx.shape[0], table.shape[1]):
        raise ValueError(f"scatter_rows: want a 2-D table, 1-D indices and values [len(indices), table width], got "
                         f"shapes {table.shape}, {idx.shape} and {values.shape}")
    if values.dtype != table.dtype:
        raise ValueError(f"scatter_rows: values of {values.dtype} for a table of {table.dtype}; cast them first")
    if not is_device_array(idx) and idx.size and (int(idx.min()) < 0 or int(idx.max()) >= table.shape[0]):
        raise IndexError(f"scatter_rows: indices span [{int(idx.min())}, {int(idx.max())}], "
                         f"outside the table's {table.shape[0]} rows")
    (scatter_rows_cuda if is_device_array(table) else scatter_rows_cpu)(table, idx, values)
