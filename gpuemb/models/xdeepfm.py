"""xDeepFM (Lian et al. 2018, "xDeepFM: Combining Explicit and Implicit Feature Interactions for Recommender
Systems").

Three terms summed into the logit: the first-order weights (a logistic regression), the Compressed Interaction
Network (CIN: explicit crosses of bounded degree, vector-wise), and a deep MLP over the flattened fields. Dense
features enter as one more field (``Linear(n_dense, D)``), so the CIN and the MLP see them, and the first-order
term as ``w·dense``.

CIN layer k over the m fields ``X0 [B, m, D]``: ``Xk[h] = Σ_{i,j} W_k[h, i, j] · (X_{k-1}[i] ⊙ X0[j])``. It is a
broadcast product ``[B, H, 1, D] · [B, 1, m, D]`` reshaped to ``[B, H·m, D]``, then one matmul with
``W_k [H_k, H·m]`` shared over the batch; sum pooling over D gives ``[B, H_k]`` per layer, and a Linear maps their
concatenation to a logit. The paper found the identity activation best on Criteo, so there is none.
"""
import numpy as np

from gpuemb.autograd import Tensor, concat, matmul
from gpuemb.autograd.backend import to_device
from gpuemb.nn import Linear, Module

from .deepfm import DeepFM


class CINLayer(Module):
    """One CIN layer: ``x [B, H, D]`` and ``x0 [B, m, D]`` to ``[B, H_out, D]``.

    ``weight [H_out, H·m]`` is Glorot-normal.
    """

    def __init__(self, h_in, m, h_out, rng):
        w = rng.normal(0.0, np.sqrt(2.0 / (h_in * m + h_out)), (h_out, h_in * m))
        self.weight = Tensor(to_device(w, np.float32), requires_grad=True)

    def forward(self, x, x0):
        B, m, D = x0.shape
        z = x.reshape(B, x.shape[1], 1, D) * x0.reshape(B, 1, m, D)
        return matmul(self.weight, z.reshape(B, -1, D))


class CIN(Module):
    """The Compressed Interaction Network over ``m`` fields: ``forward(x0 [B, m, D]) -> [B, 1]``.

    sizes: feature maps H_k per layer.
    """

    def __init__(self, m, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [CINLayer(h_in, m, h_out, rng) for h_in, h_out in zip((m, *sizes), sizes)]
        self.out = Linear(sum(sizes), 1, seed=int(rng.integers(2 ** 63)))

    def forward(self, x0):
        x, pooled = x0, []
        for layer in self.layers:
            x = layer(x, x0)
            pooled.append(x.sum(axis=2))
        return self.out(concat(pooled, axis=1))


class XDeepFM(DeepFM):
    """xDeepFM: DeepFM with the CIN in place of the FM. Hyperparameters (the paper's Criteo setup: CIN
    200-200-200, DNN 400-400; scaled down for CPU runs):

    - ``cin=(32, 32)``: feature maps of each CIN layer.
    - ``deep=(256, 128)``: hidden widths of the MLP over the ``(F + 1)·D`` flattened fields (ReLU).
    - ``dropout=0.0``: after each hidden layer of the MLP.
    """

    defaults = {"cin": (32, 32), **DeepFM.defaults}

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        self.cin = CIN(self.n_fields, self.sizes("cin", allow_empty=False), seed=self.next_seed())

    def interaction(self, fields):
        return self.cin(fields)
