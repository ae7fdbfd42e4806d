"""Linear: ``y = x @ W.T + b`` with ``W [out, in]`` as in torch.nn.Linear (see gpuemb/kernels/mlp.py for why)."""
import numpy as np

from gpuemb.autograd import Tensor, launches
from gpuemb.autograd.backend import to_device
from gpuemb.kernels.mlp import fused_linear

from .module import Module


class Linear(Module):
    """A dense layer with DLRM's initialization: W ~ N(0, sqrt(2 / (in + out))), b ~ N(0, sqrt(1 / out)).

    seed: the initialization's seed. dtype: of the parameters, which live on the backend's device.
    """

    def __init__(self, n_in, n_out, seed=0, dtype=np.float32):
        if n_in < 1 or n_out < 1:
            raise ValueError(f"Linear: sizes must be positive, got {n_in} -> {n_out}")
        rng = np.random.default_rng(seed)
        weight = rng.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), (n_out, n_in))
        bias = rng.normal(0.0, np.sqrt(1.0 / n_out), n_out)
        self.weight = Tensor(to_device(weight, dtype), requires_grad=True)
        self.bias = Tensor(to_device(bias, dtype), requires_grad=True)

    def forward(self, x):
        with launches.phase("mlp_forward"):  # a dense layer of a head counts with its MLPs
            return fused_linear(x, self.weight, self.bias, precision=self.precision)
