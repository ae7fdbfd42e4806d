"""Row-wise Adagrad (FBGEMM's and TorchRec's EXACT_ROWWISE_ADAGRAD): one accumulator per row, not per weight.

``g = grad + weight_decay·w``; ``sum += mean(g²)`` over the last axis; ``w -= lr·g / (sqrt(sum) + eps)``. The
state of a row ``[..., D]`` is ``[..., 1]``: a D-th of Adagrad's, which is why embedding tables use it. At D = 1
it is Adagrad.
"""
from dataclasses import dataclass

from gpuemb.autograd.backend import get_array_module

from .adagrad import AdagradRule


@dataclass(frozen=True)
class RowwiseAdagradRule(AdagradRule, name="rowwise_adagrad"):
    """The row-wise Adagrad update of rows ``[..., D]`` (Adagrad's settings); see the module docstring."""
    elementwise = False  # a row's mean over its D columns

    def fused_args(self):
        return "rowwise_adagrad", (self.eps,)

    def init_state(self, param):
        xp = get_array_module(param)
        return {"sum": xp.full(param.shape[:-1] + (1,), self.initial_accumulator_value, dtype=param.dtype)}

    def squares(self, g):
        """What a step adds to the accumulator: the row's mean of ``g²``, ``[..., 1]``."""
        return (g * g).mean(axis=-1, keepdims=True)
