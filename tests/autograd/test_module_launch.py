"""The CuPy launch of numba kernels (autograd/module_launch.py): numba's types, numba's argument layout, the arrays
rebuilt from it (the emulated device's side), project kernels launched through it, and the slow path."""
import numba
import numpy as np
import pytest

from gpuemb.autograd import backend, module_launch
from gpuemb.autograd.emulated.kernels import rebuild
from gpuemb.autograd.module_launch import ModuleLaunchable, argtype, flatten, launcher

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.bool_]


def host_array(a):
    """NumPy arrays as the device's: the hook a device gives ``module_launch``."""
    return (a, a.ctypes.data) if isinstance(a, np.ndarray) else None


def layouts(rng, dtype, ndim):
    """A C, an F and a non-contiguous array of ``ndim`` dimensions."""
    a = (rng.standard_normal((4, 6, 8)[:ndim]) * 50).astype(dtype)
    return [a, np.asfortranarray(a), a[..., ::2]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_array_types_are_numbas(rng, dtype, ndim):
    for a in layouts(rng, dtype, ndim):
        assert argtype(a, host_array) == numba.typeof(a), (a.flags, a.strides)


@pytest.mark.parametrize("value", [True, 3, -7, 2 ** 40, 2 ** 63 + 1, 1.5, np.float32(2), np.float16(1), np.int32(-4),
                                   np.uint64(9), np.bool_(False), np.uint8(200), (1, 2), (3, 2.5)])
def test_scalar_types_are_numbas(value):
    assert argtype(value, host_array) == numba.typeof(value)


def test_what_cannot_be_flattened_has_no_type(rng):
    for value in [1j, np.complex64(1), "s", None, 2 ** 64, (1, 1j)]:
        assert argtype(value, host_array) is None, value


def views(rng, dtype):
    a = (rng.standard_normal((9, 10)) * 50).astype(dtype)
    return [a, a[2:, 3:], a[1::2, ::3], a[::-1], np.asfortranarray(a)[1:], a[4]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flatten_then_rebuild_is_the_same_memory(rng, dtype):
    args = views(rng, dtype) + [np.int32(5), 7, 2.5, True, (4, np.float32(1.5))]
    argtypes = [argtype(a, host_array) for a in args]
    params = []
    for ty, a in zip(argtypes, args):
        flatten(ty, a, host_array, params)
    got = rebuild(argtypes, tuple(params))
    for a, b in zip(args[:6], got):
        assert b.dtype == a.dtype and b.shape == a.shape and b.strides == a.strides
        assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
        assert b.tobytes() == a.tobytes()
    assert got[6:] == [np.int32(5), np.int64(7), np.float64(2.5), np.bool_(True), (np.int64(4), np.float32(1.5))]
    assert [type(x) for x in got[6:10]] == [np.int32, np.int64, np.float64, np.bool_]


def test_scalars_keep_their_width(rng):
    params = []
    for v in [np.float16(1.5), np.uint8(3), True, 1.0, 2]:
        flatten(argtype(v, host_array), v, host_array, params)
    assert [p.nbytes for p in params] == [2, 1, 1, 8, 8]


def test_rebuild_refuses_parameters_that_disagree(rng):
    a = rng.standard_normal(6).astype(np.float32)
    ty = argtype(a, host_array)
    params = []
    flatten(ty, a, host_array, params)
    params[3] = np.int64(8)  # the item size of a float64 for a float32 array
    with pytest.raises(ValueError, match=r"6 items of 8 bytes.*want 0, 0, the shape's item count and 4$"):
        rebuild([ty], params)


def test_bad_setting_is_one_line():
    with pytest.raises(ValueError) as e:
        launcher({"GPUEMB_KERNEL_LAUNCH": "fast"})
    assert str(e.value) == "GPUEMB_KERNEL_LAUNCH='fast' is not a kernel launcher; use one of cupy, numba"
    assert launcher({}) == "cupy" and launcher({"GPUEMB_KERNEL_LAUNCH": " Numba "}) == "numba"


class Dispatcher:
    """Stands in for numba's dispatcher, counting its launches."""

    def __init__(self):
        self.launched = []

    def __getitem__(self, config):
        return lambda *args: self.launched.append((config, args))


class Flat(ModuleLaunchable):
    """Loads, per signature, a function that records the flat parameters it was handed."""
    compile_first = False

    def load(self, argtypes):
        return lambda grid, block, stream, sharedmem, params: self.ran.append((grid, block, params))


def test_unflattenable_arguments_go_through_the_dispatcher(rng):
    k = Flat(Dispatcher(), host_array)
    k.ran = []
    a = rng.standard_normal(5).astype(np.float32)
    k[3, 64](a, 2)
    k[(2, 2), 32, 0](a, 1j)
    assert len(k.ran) == 1 and k.ran[0][:2] == ((3,), (64,)) and k.ran[0][2][4] == a.ctypes.data
    assert len(k.dispatcher.launched) == 1 and k.dispatcher.launched[0][0] == ((2, 2), 32, 0)


def test_first_launch_compiles_through_the_dispatcher(rng):
    k = Flat(Dispatcher(), host_array)
    k.compile_first, k.ran = True, []
    a = rng.standard_normal(5).astype(np.float32)
    for _ in range(3):
        k[1, 32](a)
    assert len(k.dispatcher.launched) == 1 and len(k.ran) == 2


NUMBA_LAUNCHES = "GPUEMB_KERNEL_LAUNCH=numba: numba launches every kernel, nothing is flattened"
numba_launches_all = pytest.mark.skipif(backend.real_gpu() and module_launch.LAUNCHER == "numba", reason=NUMBA_LAUNCHES)


@pytest.mark.gpu
@numba_launches_all
def test_project_kernels_through_the_flat_launch(rng):
    from gpuemb.kernels.embedding_bag import embedding_bag, embedding_bag_ref
    from gpuemb.kernels.gather import _gather_rows_kernel, gather_rows
    table = rng.standard_normal((40, 12)).astype(np.float32)
    idx = rng.integers(0, 40, 70)
    offsets = np.array([0, 5, 5, 31, 70])
    for _ in range(2):  # on a GPU the first launch per signature is numba's own, the second CuPy's
        got = gather_rows(backend.to_device(table), backend.to_device(idx))
        np.testing.assert_array_equal(backend.to_host(got), table[idx])
        bags = embedding_bag(backend.to_device(table), backend.to_device(idx), backend.to_device(offsets))
        np.testing.assert_allclose(backend.to_host(bags), embedding_bag_ref(table, idx, offsets), rtol=1e-6)
    loaded = _gather_rows_kernel.functions
    assert loaded and all(fn is not None for fn in loaded.values())


@pytest.mark.gpu
@numba_launches_all
def test_host_arrays_alone_go_through_numba(rng, monkeypatch):
    from gpuemb.kernels.gather import _gather_rows_kernel
    numba_launches = []
    slow = type(_gather_rows_kernel).numba_launch
    monkeypatch.setattr(type(_gather_rows_kernel), "numba_launch",
                        lambda self, config, args: numba_launches.append(config) or slow(self, config, args))
    table = rng.standard_normal((30, 8)).astype(np.float32)
    idx = rng.integers(0, 30, 11)
    out = np.zeros((11, 8), np.float32)
    _gather_rows_kernel[1, 128, 0](table, idx, out)
    np.testing.assert_array_equal(out, table[idx])
    assert numba_launches == [(1, 128, 0)]


def test_a_numba_launch_on_a_gpu_wraps_cupys_stream_as_numbas_external_stream(monkeypatch):
    """Where CuPy launches, ``backend.kernel_stream`` hands out CuPy's stream; numba's own launch (a first launch,
    or what cannot be flattened) must get it as numba's stream, and 0 or a numba stream as they are."""
    from numba import cuda

    class CupyStream:
        ptr = 0xBEEF

    wrapped = []
    monkeypatch.setattr(cuda, "external_stream", lambda ptr: wrapped.append(ptr) or f"numba stream {ptr:#x}")
    configs = []

    class Dispatcher:
        def __getitem__(self, config):
            configs.append(config)
            return lambda *args: args

    fake_cupy = type("cupy", (), {"ndarray": type("ndarray", (), {})})
    k = module_launch.CupyLaunchable(Dispatcher(), fake_cupy)
    assert k.numba_launch((4, 64, CupyStream()), (1, 2)) == (1, 2)
    k.numba_launch(((2, 2), 32, 0, 128), ())
    assert configs == [((4,), (64,), "numba stream 0xbeef", 0), ((2, 2), (32,), 0, 128)] and wrapped == [0xBEEF]
    numba_own = type("Stream", (), {"handle": 7})()
    assert module_launch.numba_stream(numba_own) is numba_own and module_launch.numba_stream(0) == 0
