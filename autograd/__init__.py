"""gpuemb.autograd: the array backend, Tensor, Function, the tape and the differentiable basic ops."""
from . import backend
from .tensor import Tensor  # first: tensor.py pulls in the ops, which need Function, which needs Tensor
from .function import Function, ShapeError, backward, is_grad_enabled, no_grad, set_grad_enabled  # noqa: I001
from .gradcheck import gradcheck, numerical_grad
from .ops import *  # noqa: F401,F403  (the ops are this package's public API)
from .ops import __all__ as _ops_all

__all__ = ["backend", "Tensor", "Function", "ShapeError", "backward", "no_grad", "set_grad_enabled",
           "is_grad_enabled", "gradcheck", "numerical_grad", *_ops_all]
