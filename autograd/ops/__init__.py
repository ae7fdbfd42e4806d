"""The differentiable basic ops. Each is a small Function class plus a snake_case function that applies it."""
from .activations import exp, log, relu, sigmoid, tanh
from .arithmetic import add, div, mul, neg, pow, sub
from .linalg import linear, matmul
from .losses import bce_with_logits, mse
from .reductions import mean, sum
from .shape import concat, getitem, reshape, slice_axis, split, take, transpose
from .softmax import log_softmax, softmax

__all__ = [
    "add", "sub", "mul", "div", "neg", "pow",
    "matmul", "linear",
    "relu", "sigmoid", "tanh", "exp", "log",
    "sum", "mean",
    "reshape", "transpose", "concat", "split", "getitem", "slice_axis", "take",
    "softmax", "log_softmax",
    "bce_with_logits", "mse",
]
