import numpy as np
import pytest

from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.gather import gather_rows, gather_rows_cpu, gather_rows_cuda, gather_rows_ref

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
