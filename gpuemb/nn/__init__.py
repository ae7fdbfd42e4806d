"""gpuemb.nn: Module and the layers built on the fused kernels."""
from .dropout import Dropout
from .linear import Linear
from .mlp import MLP
from .module import Module

__all__ = ["Module", "Linear", "MLP", "Dropout"]
