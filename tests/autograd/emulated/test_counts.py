"""What the emulated device counts of itself (autograd/launches.py): each numba launch, each CuPy call that
launches work (by the rules of autograd/emulated/array.py), each call into cuBLASLt, and each read back, exactly,
with the crossings of ``transfers`` as they were."""
import numpy as np
import pytest
from numba import cuda

from gpuemb.autograd import backend, launches, transfers

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(backend.real_gpu(), reason="counts the emulated device's own "
                                                  "launches; on a real GPU only the backend's reads back count")]


def counted(fn):
    """What ``fn()`` launched and read back on this thread: ``(numba, cupy, cublaslt, readbacks)``."""
    before = launches.COUNTS.snapshot(this_thread=True)
    fn()
    got = launches.COUNTS.since(before, this_thread=True)
    return tuple(got[k] for k in launches.FIELDS)


@pytest.fixture
def a(rng):
    return backend.to_device(rng.integers(-5, 5, 12))


@pytest.mark.parametrize("name, op, n", [
    ("an elementwise op", lambda xp, a: a + 1, 1),
    ("a comparison", lambda xp, a: a > 0, 1),
    ("a ufunc with out=", lambda xp, a: xp.add(a, 1, out=a), 1),
    ("an in-place operator", lambda xp, a: a.__imul__(2), 1),
    ("a unary operator", lambda xp, a: -a, 1),
    ("a reduction", lambda xp, a: a.sum(), 1),
    ("a reduction of cupy", lambda xp, a: xp.max(a), 1),
    ("a sort", lambda xp, a: xp.sort(a), 1),
    ("a sort in place", lambda xp, a: a.sort(), 1),
    ("an argsort", lambda xp, a: xp.argsort(a), 1),
    ("a searchsorted", lambda xp, a: xp.searchsorted(a[:3], a), 1),
    ("a concatenate", lambda xp, a: xp.concatenate([a, a]), 1),
    ("a stack", lambda xp, a: xp.stack([a, a]), 1),
    ("a cumsum", lambda xp, a: xp.cumsum(a), 1),
    ("an astype to another dtype", lambda xp, a: a.astype(np.float32), 1),
    ("an astype that may keep the array", lambda xp, a: a.astype(a.dtype, copy=False), 0),
    ("a copy", lambda xp, a: a.copy(), 1),
    ("zeros (a memset)", lambda xp, a: xp.zeros(5), 1),
    ("arange", lambda xp, a: xp.arange(5), 1),
    ("empty", lambda xp, a: xp.empty(5), 0),
    ("empty_like", lambda xp, a: xp.empty_like(a), 0),
    ("zeros without elements", lambda xp, a: xp.zeros(0), 0),
    ("fill", lambda xp, a: a.fill(3), 1),
    ("a reshape that is a view", lambda xp, a: a.reshape(3, 4), 0),
    ("a reshape that must copy", lambda xp, a: a.reshape(3, 4).T.reshape(-1), 1),
    ("a transpose", lambda xp, a: a.reshape(3, 4).transpose(), 0),
    ("broadcast_to", lambda xp, a: xp.broadcast_to(a, (2, 12)), 0),
    ("split", lambda xp, a: xp.split(a, 3), 0),
    ("ascontiguousarray of a contiguous array", lambda xp, a: xp.ascontiguousarray(a), 0),
    ("ascontiguousarray of a strided one", lambda xp, a: xp.ascontiguousarray(a[::2]), 1),
    ("asarray of a device array", lambda xp, a: xp.asarray(a), 0),
    ("array of a device array (a copy)", lambda xp, a: xp.array(a), 1),
    ("a basic index (a view)", lambda xp, a: a[2:5], 0),
    ("an integer index (a 0-d view)", lambda xp, a: a[3], 0),
    ("a gather by a device index", lambda xp, a: a[a[:3] % 12], 2),  # % and the gather
    ("a gather by no index", lambda xp, a: a[a[:0]], 0),
    ("an assignment to a slice", lambda xp, a: a.__setitem__(slice(0, 4), 7), 1),
    ("a scatter by a device index", lambda xp, a: a.__setitem__(a[:3] % 12, 7), 2),  # % and the scatter
    ("a NumPy function of a device array", lambda xp, a: np.cumsum(a), 1),
    ("a shape query", lambda xp, a: (xp.shape(a), a.ndim, a.size), 0),
])
def test_a_cupy_call_counts_one_launch_when_it_writes_elements(a, name, op, n):
    assert counted(lambda: op(backend.xp, a)) == (0, n, 0, 0), name


@pytest.mark.parametrize("name, op, reads", [
    ("a boolean mask's selection", lambda xp, a, mask: a[mask], 1),
    ("a boolean mask's assignment", lambda xp, a, mask: a.__setitem__(mask, 0), 1),
    ("flatnonzero", lambda xp, a, mask: xp.flatnonzero(a), 1),
    ("nonzero", lambda xp, a, mask: a.nonzero(), 1),
    ("where of one argument", lambda xp, a, mask: xp.where(mask), 1),
    ("argwhere", lambda xp, a, mask: xp.argwhere(a), 1),
    ("unique", lambda xp, a, mask: xp.unique(a), 1),
    ("bincount (is a key negative? the largest key?)", lambda xp, a, mask: xp.bincount(mask), 2),
])
def test_a_result_sized_by_the_data_launches_once_and_reads_its_size_back(a, name, op, reads):
    xp = backend.xp
    mask = a > 0
    assert counted(lambda: op(xp, a, mask)) == (0, 1, 0, reads), name


def test_a_mask_or_a_size_from_no_elements_reads_nothing(a):
    xp = backend.xp
    empty = xp.zeros(0, bool)
    assert counted(lambda: a[:0][empty]) == (0, 0, 0, 0)
    assert counted(lambda: xp.flatnonzero(empty)) == (0, 0, 0, 0)


def test_each_read_back_of_a_value_counts_beside_its_transfer(a):
    xp = backend.xp
    s = a.sum()
    before = transfers.COUNTS.snapshot(this_thread=True)
    assert counted(lambda: (a.get(), s.item(), a.tolist(), backend.to_host(a), backend.item(s))) == (0, 0, 0, 5)
    crossed = transfers.COUNTS.since(before, this_thread=True)
    assert crossed["to_host"] == 5 and crossed["syncs"] == 5  # the crossings are counted as before
    host = np.arange(4)
    assert counted(lambda: (backend.to_device(host), xp.asarray(host), a.set(np.zeros(12, a.dtype)))) == (0, 0, 0, 0)


def test_a_scatter_add_is_one_launch(a):
    xp = backend.xp
    cupyx = backend.library("cupyx")
    assert counted(lambda: cupyx.scatter_add(a, xp.asarray([0, 1, 0]), 1)) == (0, 1, 0, 0)
    assert counted(lambda: cupyx.scatter_add(a, xp.asarray([], np.int64), 1)) == (0, 0, 0, 0)


def _double(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = 2 * x[i]


def test_each_numba_launch_counts_once(rng):
    kernel = backend.launchable(cuda.jit(_double))  # what launch.kernel makes, left out of its PTX registry
    x = backend.to_device(rng.standard_normal(40).astype(np.float32))
    out = backend.xp.empty_like(x)
    assert counted(lambda: [kernel[1, 64](x, out) for _ in range(3)]) == (3, 0, 0, 0)
    np.testing.assert_allclose(backend.to_host(out), 2 * backend.to_host(x))


def test_each_plan_and_execute_of_cublaslt_counts_once(rng):
    nvmath = backend.library("nvmath.linalg.advanced")
    a, b = (backend.to_device(rng.standard_normal(s).astype(np.float32)) for s in ((4, 3), (3, 5)))
    assert counted(lambda: nvmath.matmul(a, b)) == (0, 0, 2, 0)  # planned and run once
    mm = nvmath.Matmul(a, b)
    assert counted(lambda: (mm.plan(), mm.execute(), mm.execute())) == (0, 0, 3, 0)
