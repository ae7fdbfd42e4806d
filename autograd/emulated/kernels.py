"""numba.cuda kernels on the emulated device: launched as on a GPU, through their flattened parameters
(``module_launch``), then run in numba's simulator on arrays rebuilt from those parameters alone; each launch
counted (``launches.numba``).

Rebuilding each array from its item count, item size, data pointer, shape and strides, and not from the object
handed in, makes every emulated launch a test of the argument layout a GPU's CuPy launch passes."""
import ctypes
import functools
import threading

import numpy as np

from .. import launches

# numba's simulator keeps the running kernel's context in module globals, so two threads launching at once (the
# training step and the pipeline's prefetch) would read each other's; on a GPU they simply queue. One at a time.
_ONE_AT_A_TIME = threading.Lock()

from .array import ndarray


def device_array(a):
    """``(NumPy array, data pointer)`` of an emulated device array; None for anything else."""
    return (a._a, a._a.ctypes.data) if isinstance(a, ndarray) else None


def rebuild(argtypes, params):
    """The arguments of types ``argtypes`` that the flat kernel parameters ``params`` describe: arrays over the
    memory their pointers name, scalars as passed."""
    args, i = [], 0
    for ty in argtypes:
        a, i = _take(ty, params, i)
        args.append(a)
    return args


def _take(ty, params, i):
    """The argument of type ``ty`` whose parameters start at ``params[i]``, and where the next one starts."""
    from numba.core import types
    if isinstance(ty, types.BaseTuple):
        items = []
        for t in ty:
            a, i = _take(t, params, i)
            items.append(a)
        return tuple(items), i
    if not isinstance(ty, types.Array):
        return params[i], i + 1
    meminfo, parent, nitems, itemsize, ptr = (int(p) for p in params[i:i + 5])
    shape = tuple(int(n) for n in params[i + 5:i + 5 + ty.ndim])
    strides = tuple(int(s) for s in params[i + 5 + ty.ndim:i + 5 + 2 * ty.ndim])
    dtype = np.dtype(str(ty.dtype))
    if meminfo or parent or itemsize != dtype.itemsize or nitems != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"kernel parameters of {ty}: meminfo {meminfo}, parent {parent}, {nitems} items of "
                         f"{itemsize} bytes, shape {shape}; want 0, 0, the shape's item count and {dtype.itemsize}")
    return _at_address(ptr, dtype, shape, strides), i + 5 + 2 * ty.ndim


def _at_address(ptr, dtype, shape, strides):
    """A NumPy array over the memory at ``ptr`` (no copy)."""
    if 0 in shape:
        return np.empty(shape, dtype)
    low = sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
    high = sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0) + dtype.itemsize
    memory = (ctypes.c_char * (high - low)).from_address(ptr + low)
    return np.ndarray(shape, dtype, buffer=memory, offset=-low, strides=strides)


def _simulated(a):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    return FakeCUDAArray(a) if isinstance(a, np.ndarray) else a


@functools.cache
def launchable_class():
    """The emulated device's launchable, made on first use: module_launch imports numba, which must wait until this
    package has switched numba's simulator on (``switch_on_simulator``)."""
    from ..module_launch import ModuleLaunchable

    class Launchable(ModuleLaunchable):
        """A ``cuda.jit`` kernel whose launches take device arrays. A launch with a device array and a host array
        together is refused: on a GPU numba would copy the host one across and back, unseen."""

        compile_first = False  # the simulator compiles nothing: every launch goes through the flattened parameters

        def __init__(self, dispatcher):
            super().__init__(dispatcher, device_array)
            self.py_func = getattr(dispatcher, "py_func", None) or getattr(dispatcher, "fn", None)

        def load(self, argtypes):
            """The simulator's run of the kernel on the arguments rebuilt from their parameters."""
            def run(grid, block, stream, sharedmem, params):
                return self.dispatcher[grid, block, stream, sharedmem](*map(_simulated, rebuild(argtypes, params)))
            return run

        def numba_launch(self, config, args):
            return self.dispatcher[config](*(_simulated(a._a) if isinstance(a, ndarray) else a for a in args))

        def __getitem__(self, config):
            launch = super().__getitem__(config)
            name = getattr(self.py_func, "__name__", "kernel")

            def run(*args):
                if any(isinstance(a, ndarray) for a in args):
                    for a in args:
                        if isinstance(a, np.ndarray) and a.ndim:
                            raise TypeError(f"kernel {name}: a host array (shape {a.shape}) among device arrays; "
                                            f"copy it across with backend.to_device first")
                    for i, a in enumerate(args):
                        if isinstance(a, ndarray) and not a._a.flags.aligned:
                            raise ValueError(f"kernel {name}: argument {i} ({a.dtype}, shape {a.shape}) starts or "
                                             f"steps off its {a.dtype.alignment}-byte alignment; a GPU stops with "
                                             "CUDA_ERROR_MISALIGNED_ADDRESS. Pass a copy (`.copy()`)")
                launches.numba()
                with _ONE_AT_A_TIME:
                    return launch(*args)
            return run

    return Launchable


def launchable(dispatcher):
    return launchable_class()(dispatcher)
