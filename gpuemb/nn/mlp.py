"""MLP: a stack of Linear layers run as one FusedMLP, so bias, ReLU and dropout sit in the matmul epilogues."""
import numpy as np

from gpuemb.autograd import launches, sigmoid
from gpuemb.kernels.mlp import FusedLayer, FusedMLP

from .linear import Linear
from .module import Module

LAST_ACTIVATIONS = (None, "relu", "sigmoid")


class MLP(Module):
    """``sizes = [in, h1, ..., out]``: hidden layers are Linear + ReLU + dropout(p), the last has last_activation.

    Layer i's weights are ``layers.i.weight`` ``[out, in]`` and ``layers.i.bias``. seed: the initialization and
    the dropout draws of every layer derive from it (one child seed each). The dropout step advances once per
    training call.
    """

    extra_state_names = ("step",)  # with the seed, the step fixes every later dropout mask

    def __init__(self, sizes, dropout=0.0, last_activation=None, seed=0, dtype=np.float32):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes {sizes} need at least an input and an output size")
        if last_activation not in LAST_ACTIVATIONS:
            raise ValueError(f"MLP: last_activation={last_activation!r}; use one of {LAST_ACTIVATIONS}")
        children = np.random.SeedSequence(seed).spawn(len(sizes) - 1)
        init_seeds, keys = zip(*(c.generate_state(2, np.uint64) for c in children))
        self.layers = [Linear(n_in, n_out, int(s), dtype) for n_in, n_out, s in zip(sizes, sizes[1:], init_seeds)]
        hidden = [FusedLayer(True, dropout, int(k)) for k in keys[:-1]]
        self.fused_layers = (*hidden, FusedLayer(last_activation == "relu", 0.0, int(keys[-1])))
        for layer in self.fused_layers:
            layer.validate()
        self.last_activation, self.step = last_activation, 0

    def forward(self, x):
        with launches.phase("mlp_forward"):
            params = [t for layer in self.layers for t in (layer.weight, layer.bias)]
            y = FusedMLP(self.fused_layers, self.step, self.training, self.precision, self.row0).apply(x, *params)
            if self.training:
                self.step += 1
            return sigmoid(y) if self.last_activation == "sigmoid" else y
