"""What several models share past the embeddings: the first-order (wide) term, and the two ways dense features
enter a model that has no bottom MLP: as one more field, or concatenated to the flattened embeddings."""
import numpy as np

from gpuemb.autograd import Tensor, concat, linear
from gpuemb.autograd.backend import to_device
from gpuemb.nn import Linear, Module


def flat_with_dense(emb, dense):
    """``[B, F·D + n_dense]``: the embeddings ``[B, F, D]`` side by side, then the dense features."""
    flat = emb.reshape(emb.shape[0], -1)
    return concat([flat, dense], axis=1) if dense.shape[1] else flat


class DenseField(Module):
    """The dense features as one more field: ``Linear(n_dense, D)``, stacked after the F embeddings.

    ``forward(dense, emb)`` is ``[B, F + 1, D]``, or ``emb`` itself when there are no dense features.
    """

    def __init__(self, n_dense, dim, seed=0):
        self.proj = Linear(n_dense, dim, seed) if n_dense else None

    def forward(self, dense, emb):
        if self.proj is None:
            return emb
        B, _, D = emb.shape
        return concat([emb, self.proj(dense).reshape(B, 1, D)], axis=1)


class FirstOrder(Module):
    """A logistic regression over the raw features: ``b + w·dense + Σ_f weight(key_f)``, ``[B]``.

    The per-key weights are the ``[B, F, 1]`` lookups of the model's dim-1 collection; ``w`` and ``b`` start at
    zero, as a logistic regression's do.
    """

    def __init__(self, n_dense):
        self.bias = Tensor(to_device(np.zeros(1), np.float32), requires_grad=True)
        self.weight = Tensor(to_device(np.zeros((1, n_dense)), np.float32), requires_grad=True) if n_dense else None

    def forward(self, dense, weights):
        y = weights.sum(axis=(1, 2)) + self.bias
        return y if self.weight is None else y + linear(dense, self.weight).reshape(-1)
