"""``cupy`` of the emulated device: CuPy's array functions, running NumPy's on device arrays.

A function takes device arrays and Python or NumPy scalars, and returns device arrays. A host array is refused
everywhere except where CuPy uploads it (``asarray``, ``array``), which counts the upload. Each call's launch
and reads back are counted as array.py says.
"""
import types

import numpy as np

from . import cuda
from .array import call, ndarray, wrap
from .. import transfers

UPLOADS = ("array", "asarray", "asanyarray")
"""The functions that take host data and copy it to the device, as CuPy's do."""


def _upload(name):
    numpy_fn = getattr(np, name)

    def upload(a, dtype=None, *args, **kwargs):
        if isinstance(a, ndarray):
            same = dtype is None or np.dtype(dtype) == a.dtype
            return a.copy() if name == "array" else (a if same else a.astype(dtype))
        host = numpy_fn(a, dtype, *args, **kwargs)
        transfers.to_device(host.nbytes)
        return wrap(np.array(host, copy=True))  # a device array never shares the host's memory
    upload.__name__ = name
    return upload


def _function(name, fn):
    def function(*args, **kwargs):
        return call(name, fn, args, kwargs, f"cupy.{name}")
    function.__name__ = name
    return function


class EmulatedCupy(types.ModuleType):
    """The module object: ``backend.xp`` under ``GPUEMB_DEVICE=emulated``."""

    ndarray = ndarray
    cuda = cuda
    __version__ = "emulated"

    def __init__(self):
        super().__init__("emulated_cupy", __doc__)
        for name in UPLOADS:
            setattr(self, name, _upload(name))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            value = getattr(np, name)
        except AttributeError:
            raise AttributeError(f"the emulated cupy has no {name!r}: NumPy, which it runs, has none") from None
        if isinstance(value, types.ModuleType):
            raise AttributeError(f"the emulated cupy has no submodule {name!r}: add it in autograd/emulated if the "
                                 f"project needs it")
        if callable(value) and not isinstance(value, type):
            value = _function(name, value)
        setattr(self, name, value)  # looked up once
        return value

    @staticmethod
    def asnumpy(a, stream=None, order="C", out=None):
        if isinstance(a, ndarray):
            return a.get(order=order, out=out)
        return np.asarray(a, order=order)

    def get_array_module(self, *args):
        return self if any(isinstance(a, ndarray) for a in args) else np
