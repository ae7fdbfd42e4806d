"""gpuemb: train recommendation models whose embedding tables are larger than GPU memory."""
import importlib

from . import host_tuning  # noqa: F401  OpenBLAS's and malloc's settings, before NumPy loads (its docstring)

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
