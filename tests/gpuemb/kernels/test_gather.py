import numpy as np
import pytest

from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.gather import (gather_rows, gather_rows_cpu, gather_rows_cuda, gather_rows_ref, scatter_rows,
                                   scatter_rows_cpu, scatter_rows_ref)

SHAPES = [(1, 1, 1), (7, 3, 5), (100, 13, 37), (50, 16, 256)]  # rows, dim, n: awkward sizes included


@pytest.mark.parametrize("rows,dim,n", SHAPES)
def test_cpu_matches_reference(rng, rows, dim, n):
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    idx = rng.integers(0, rows, n)
    np.testing.assert_array_equal(gather_rows_cpu(table, idx), gather_rows_ref(table, idx))


def test_dispatch_on_each_backend(xp, rng):
    table = rng.standard_normal((64, 24)).astype(np.float32)
    idx = rng.integers(0, 64, 300)
    got = gather_rows(xp.asarray(table), xp.asarray(idx))
    assert type(got) is type(xp.asarray(table))
    np.testing.assert_array_equal(to_host(got), table[idx])


def test_out_of_range_index_is_refused(rng):
    table = rng.standard_normal((5, 4)).astype(np.float32)
    with pytest.raises(IndexError, match="outside the table's 5 rows"):
        gather_rows(table, np.array([0, 5]))


@pytest.mark.cudasim
@pytest.mark.parametrize("rows,dim,n", [(1, 1, 1), (9, 5, 7), (16, 33, 12)])
def test_cuda_kernel_matches_reference(rng, rows, dim, n):
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    idx = rng.integers(0, rows, n)
    np.testing.assert_array_equal(gather_rows_cuda(table, idx), gather_rows_ref(table, idx))


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
def test_cuda_kernel_on_real_shapes(rng):
    table = rng.standard_normal((1_000_000, 128)).astype(np.float32)
    idx = rng.integers(0, table.shape[0], 65536)
    np.testing.assert_array_equal(to_host(gather_rows_cuda(to_device(table), to_device(idx))), table[idx])


@pytest.mark.parametrize("rows,dim,n", SHAPES)
def test_scatter_cpu_matches_reference(rng, rows, dim, n):
    n = min(n, rows)  # distinct indices
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    idx, values = rng.permutation(rows)[:n], rng.standard_normal((n, dim)).astype(np.float32)
    want = table.copy()
    scatter_rows_ref(want, idx, values)
    scatter_rows_cpu(table, idx, values)
    np.testing.assert_array_equal(table, want)


def test_scatter_dispatches_on_each_backend(xp, rng):
    table = rng.standard_normal((64, 24)).astype(np.float32)
    idx, values = rng.permutation(64)[:40], rng.standard_normal((40, 24)).astype(np.float32)
    got = xp.asarray(table)
    scatter_rows(got, xp.asarray(idx), xp.asarray(values))
    table[idx] = values
    np.testing.assert_array_equal(to_host(got), table)


def test_scatter_refuses_what_it_cannot_write(rng):
    table = np.zeros((5, 4), np.float32)
    with pytest.raises(IndexError, match="outside the table's 5 rows"):
        scatter_rows(table, np.array([0, 5]), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="cast them first"):
        scatter_rows(table, np.array([0, 1]), np.ones((2, 4), np.float64))
    with pytest.raises(ValueError, match="values \\[len\\(indices\\), table width\\]"):
        scatter_rows(table, np.array([0, 1]), np.ones((2, 3), np.float32))
    assert not table.any()  # nothing written by a refused call
