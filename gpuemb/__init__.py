"""gpuemb: train recommendation models whose embedding tables are larger than GPU memory."""
import importlib
import os

# OpenBLAS's idle threads spin for 2**28 cycles (about 0.1 s) after each matmul before they sleep, and a CPU step
# runs numba's parallel kernels between its matmuls: on the 2-core machine a kernel right after a matmul took 2.8
# ms against 1.7 ms alone, and kaggle's step 64.9 ms against 58.7 ms (medians of 6; docs/perf/README.md). 2**4
# cycles lets them sleep at once. OpenBLAS reads this when it loads, so it holds where NumPy loads after gpuemb;
# a value already set is kept.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

__version__ = "0.1.0"

# The layers load when first named, not at ``import gpuemb``: the inference runtime (``gpuemb.serve``) must load
# without the training stack (the backend's device choice, the tape), while ``gpuemb.Tensor`` and
# ``gpuemb.autograd`` still work as before (PEP 562).
_LAZY = {"autograd": ("gpuemb.autograd", None), "optim": ("gpuemb.optim", None),
         "backend": ("gpuemb.autograd", "backend"), "Tensor": ("gpuemb.autograd", "Tensor"),
         "no_grad": ("gpuemb.autograd", "no_grad")}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'gpuemb' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)
