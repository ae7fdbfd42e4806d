"""numba.cuda kernels on the emulated device: launched in numba's simulator on the device arrays' own memory, each
launch counted (``launches.numba``)."""
import threading

import numpy as np

from .. import launches

# numba's simulator keeps the running kernel's context in module globals, so two threads launching at once (the
# training step and the pipeline's prefetch) would read each other's; on a GPU they simply queue. One at a time.
_ONE_AT_A_TIME = threading.Lock()

from .array import ndarray


class Launchable:
    """A ``cuda.jit`` kernel whose launches take device arrays. A launch with a device array and a host array
    together is refused: on a GPU numba would copy the host one across and back, unseen."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.py_func = getattr(dispatcher, "py_func", None) or getattr(dispatcher, "fn", None)

    def __getitem__(self, config):
        launch = self.dispatcher[config]
        name = getattr(self.py_func, "__name__", "kernel")

        def run(*args):
            if any(isinstance(a, ndarray) for a in args):
                for a in args:
                    if isinstance(a, np.ndarray) and a.ndim:
                        raise TypeError(f"kernel {name}: a host array (shape {a.shape}) among device arrays; "
                                        f"copy it across with backend.to_device first")
                for i, a in enumerate(args):
                    if isinstance(a, ndarray) and not a._a.flags.aligned:
                        raise ValueError(f"kernel {name}: argument {i} ({a.dtype}, shape {a.shape}) starts or steps "
                                         f"off its {a.dtype.alignment}-byte alignment; a GPU stops with "
                                         "CUDA_ERROR_MISALIGNED_ADDRESS. Pass a copy (`.copy()`)")
                from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
                args = [FakeCUDAArray(a._a) if isinstance(a, ndarray) else a for a in args]
            launches.numba()
            with _ONE_AT_A_TIME:
                return launch(*args)
        return run

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


def launchable(dispatcher):
    return Launchable(dispatcher)
