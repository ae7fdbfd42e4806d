"""gpuemb: train recommendation models whose embedding tables are larger than GPU memory."""
from . import autograd, optim  # noqa: F401  (one import name brings every layer)
from .autograd import Tensor, backend, no_grad  # noqa: F401

__version__ = "0.1.0"
