"""The emulated CUDA device (``GPUEMB_DEVICE=emulated``): the project's GPU code paths, run on a CPU, in CI.

A strict stand-in for what the GPU path calls, built on NumPy:
- ``cupy``: device arrays of their own type, CuPy's functions, ``cupy.cuda`` (devices, streams, events);
- ``cupyx``: ``scatter_add`` and pinned host memory;
- numba.cuda kernels run in numba's simulator, which must be on before numba is imported (this module switches
  it on when it can, and refuses when it is too late);
- ``nvmath.linalg.advanced``: cuBLASLt's matmul with the epilogues the project uses, to their exact semantics;
- ``nccl``: CuPy's NCCL binding, over MPI between processes, reading and writing device arrays' memory.

It checks the code paths, the dtypes, the host-device crossings (each one counted in ``transfers``) and the
results. It cannot show speed, memory errors, races between streams, or real cuBLASLt and NCCL behaviour: those
need a GPU. Only the backend knows that this package exists.
"""
import importlib
import os
import sys

from .kernels import launchable
from .namespace import EmulatedCupy

cupy = EmulatedCupy()
cupy.launchable = launchable

_LIBRARIES = {"cupyx": ".cupyx", "nccl": ".nccl", "nvmath.linalg": ".nvmath", "nvmath.linalg.advanced": ".nvmath"}


def library(name):
    """The stand-in for the GPU library ``name`` (see ``backend.library``)."""
    if name not in _LIBRARIES:
        raise ImportError(f"the emulated device has no stand-in for {name!r}; it has {', '.join(_LIBRARIES)}")
    return importlib.import_module(_LIBRARIES[name], __name__)


cupy.library = library


def switch_on_simulator():
    """Run numba.cuda kernels in numba's simulator from here on; raises when numba was imported without it."""
    if "numba" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        return
    from numba.core import config
    if not config.ENABLE_CUDASIM:
        from ..backend import DeviceUnavailableError
        raise DeviceUnavailableError(
            "GPUEMB_DEVICE=emulated runs numba.cuda kernels in numba's simulator, but numba was imported before "
            "gpuemb with the simulator off; set NUMBA_ENABLE_CUDASIM=1 in the environment, or import gpuemb first")
