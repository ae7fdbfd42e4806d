"""A numba.cuda kernel launched by CuPy: numba only compiles it.

On an H200 (tools/gpu_host_cost.py, 2026-11-27) numba's own launch of a kernel on CuPy arrays cost the host about
201 µs, 175 of them turning each argument's ``__cuda_array_interface__`` into a numba array; the same kernel's code
launched by CuPy with numba's argument layout cost 13 µs. So here each argument is typed from its dtype, number of
dimensions and layout (a cache), flattened into the parameters numba's ``_Kernel._prepare_args`` passes, and handed
to a function of the kernel's code, which a device loads once per signature (``ModuleLaunchable.load``).

What cannot be flattened (a host array, a record, a complex number) goes through numba's dispatcher, as before: the
same results, the slow way. On a GPU so does each signature's first launch, which compiles it as it always did.
"""
import os

import numpy as np
from numba.core import types
from numba.np import numpy_support

SETTING = "GPUEMB_KERNEL_LAUNCH"
LAUNCHERS = ("cupy", "numba")


def launcher(environ=os.environ):
    """Who launches kernels on a GPU, from ``GPUEMB_KERNEL_LAUNCH``: ``cupy`` (the default) or ``numba``."""
    value = environ.get(SETTING, "cupy").strip().lower() or "cupy"
    if value not in LAUNCHERS:
        raise ValueError(f"{SETTING}={value!r} is not a kernel launcher; use one of {', '.join(LAUNCHERS)}")
    return value


LAUNCHER = launcher()

_SCALARS = {bool: types.boolean, np.bool_: types.boolean, float: types.float64}
_ARRAYS = {}
_INT64 = (-2 ** 63, 2 ** 63)


def argtype(a, device_array):
    """numba's type for the argument ``a`` (what ``numba.typeof`` gives), or None where it cannot be flattened.

    ``device_array(a)``: ``(array, data pointer)`` for the device's arrays, None for anything else."""
    ty = _SCALARS.get(type(a))
    if ty is not None:
        return ty
    found = device_array(a)
    if found is not None:
        x = found[0]
        flags = x.flags
        key = (x.dtype, x.ndim, "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A")
        ty = _ARRAYS.get(key)
        if ty is None:
            ty = _ARRAYS[key] = types.Array(numpy_support.from_dtype(key[0]), key[1], key[2])
        return ty
    if type(a) is int:  # numba types a Python int by its value (numba's typeof: intp below 2**63)
        return types.int64 if _INT64[0] <= a < _INT64[1] else types.uint64 if 0 <= a < 2 ** 64 else None
    if isinstance(a, np.generic) and a.dtype.kind in "biuf":
        ty = _SCALARS[type(a)] = numpy_support.from_dtype(a.dtype)
        return ty
    if type(a) is tuple:
        tys = [argtype(v, device_array) for v in a]
        return None if any(t is None for t in tys) else types.BaseTuple.from_types(tys, tuple)
    return None


def flatten(ty, a, device_array, out):
    """Append to ``out`` the kernel parameters numba passes for ``a`` of type ``ty`` (``_Kernel._prepare_args``):
    per array its meminfo and parent (0), item count, item size, data pointer, shape and strides in bytes; a
    scalar as a NumPy scalar of its exact width (a boolean as one byte); a tuple, its items in turn."""
    if isinstance(ty, types.Array):
        x, ptr = device_array(a)
        out += (np.uint64(0), np.uint64(0), np.int64(x.size), np.int64(x.itemsize), np.uint64(ptr))
        out += map(np.int64, x.shape)
        out += map(np.int64, x.strides)
    elif isinstance(ty, types.BaseTuple):
        for t, v in zip(ty, a):
            flatten(t, v, device_array, out)
    else:
        out.append(_NUMPY_SCALAR[ty](a))


_NUMPY_SCALAR = {numpy_support.from_dtype(np.dtype(t)): t for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64)}


def launch_config(config):
    """``(grid, block, stream, sharedmem)`` of a ``kernel[...]`` subscript, each dimension a tuple."""
    if len(config) not in (2, 3, 4):
        raise ValueError(f"a kernel launch takes [grid, block(, stream(, sharedmem))], got {len(config)} items")
    grid, block, stream, sharedmem = (tuple(config) + (0, 0))[:4]
    return (grid if isinstance(grid, tuple) else (grid,)), (block if isinstance(block, tuple) else (block,)), \
        stream, sharedmem


_UNLOADED = object()


class ModuleLaunchable:
    """A ``cuda.jit`` dispatcher whose launches flatten their arguments for a function that ``load`` gives.

    A device says which arrays are its own (``device_array``) and how a signature's function is loaded (``load``,
    which returns ``function(grid, block, stream, sharedmem, params)``, or None for numba's launch)."""

    compile_first = True  # a signature's first launch goes through numba, which compiles it

    def __init__(self, dispatcher, device_array):
        self.dispatcher = dispatcher
        self.device_array = device_array
        self.functions = {}  # argument types -> the loaded function, or None: numba launches that signature

    def load(self, argtypes):
        raise NotImplementedError

    def numba_launch(self, config, args):
        """The launch numba's dispatcher makes of ``args``: the slow path, for what cannot be flattened."""
        return self.dispatcher[config](*args)

    def __getitem__(self, config):
        grid, block, stream, sharedmem = launch_config(config)

        def launch(*args):
            argtypes = tuple(argtype(a, self.device_array) for a in args)
            fn = self.functions.get(argtypes, _UNLOADED) if None not in argtypes else None
            if fn is _UNLOADED:
                if self.compile_first:
                    self.numba_launch(config, args)
                    self.functions[argtypes] = self.load(argtypes)
                    return None
                fn = self.functions[argtypes] = self.load(argtypes)
            if fn is None:
                return self.numba_launch(config, args)
            params = []
            for ty, a in zip(argtypes, args):
                flatten(ty, a, self.device_array, params)
            return fn(grid, block, stream, sharedmem, tuple(params))
        return launch

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


class _Stream:
    """A raw stream handle as CuPy's ``Function`` takes one (it reads ``.ptr``)."""
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr


def stream_pointer(stream):
    """The raw handle of ``stream``: numba's (``handle``), CuPy's (``ptr``) or 0, the legacy default stream, which
    is where numba launches on 0 too."""
    if not stream:
        return 0
    ptr = getattr(stream, "ptr", None)
    return int(ptr if ptr is not None else stream.handle or 0)


def numba_stream(stream):
    """``stream`` as numba's launch takes it: a CuPy stream (what ``backend.kernel_stream`` gives where CuPy
    launches, as making a numba stream at every launch would cost the host for nothing) wrapped as numba's external
    stream; numba's own, or 0, as they are."""
    if not stream or not hasattr(stream, "ptr"):
        return stream
    from numba import cuda
    return cuda.external_stream(stream.ptr)


class CupyLaunchable(ModuleLaunchable):
    """On a GPU: the cubin numba compiled for a signature, loaded into CuPy once and launched by CuPy."""

    def __init__(self, dispatcher, cupy):
        super().__init__(dispatcher, lambda a: (a, a.data.ptr) if type(a) is cupy.ndarray else None)
        self.cupy = cupy

    def numba_launch(self, config, args):
        grid, block, stream, sharedmem = launch_config(config)
        return self.dispatcher[grid, block, numba_stream(stream), sharedmem](*args)

    def load(self, argtypes):
        """CuPy's function for the kernel numba compiled for ``argtypes``; None for what only numba can launch:
        a kernel whose code depends on the launch, a debug or cooperative one, or one with setup code."""
        kernel = self.dispatcher.overloads.get(argtypes)
        if kernel is None or getattr(kernel, "launch_config_sensitive", False) or kernel.debug \
                or getattr(kernel, "cooperative", False) or getattr(kernel._codelibrary, "_setup_functions", None):
            return None
        cubin = kernel._codelibrary.get_cubin()
        cubin = getattr(cubin, "code", cubin)
        if not isinstance(cubin, bytes):
            return None
        module = self.cupy.cuda.function.Module()
        module.load(cubin)
        fn = module.get_function(kernel._codelibrary._entry_name)

        def run(grid, block, stream, sharedmem, params):
            fn(grid, block, params, shared_mem=sharedmem, stream=_Stream(stream_pointer(stream)))
        return run
