"""The Compressed Interaction Network of xDeepFM (Lian et al. 2018): explicit, vector-wise feature crosses.

Layer k over the m fields ``X0``: ``Xk[h] = Σ_{i,j} W_k[h, i, j] · (X_{k-1}[i] ⊙ X0[j])``, every product taken
along the embedding axis D. Written over the batch it is one matrix product per layer:
``Xk = W_k · Z`` with ``Z[(i, j), n] = X_{k-1}[i, n] · X0[j, n]``, where the column ``n`` runs over (sample, d).

Layout: the fields are kept feature-major, ``[m, B·D]``, so ``Z`` is ``[H·m, B·D]`` and the product is a single
wide GEMM with ``W_k [H_out, H·m]`` (the sample-major layout would be B tiny matrix products). That product, which
never keeps all of ``Z``, is the fused op ``CINProduct`` of ``gpuemb/kernels/cin_product.py``.
"""
import numpy as np

from gpuemb.autograd import Tensor, concat
from gpuemb.autograd.backend import to_device
from gpuemb.kernels.cin_product import CINProduct
from gpuemb.nn import Linear, Module


class CINLayer(Module):
    """One CIN layer: ``x [H, N]`` and ``x0 [m, N]`` (feature-major) to ``[H_out, N]``.

    ``weight [H_out, H·m]`` is Glorot-normal; its column ``i·m + j`` weighs the cross of ``x[i]`` and ``x0[j]``.
    """

    def __init__(self, h_in, m, h_out, rng):
        w = rng.normal(0.0, np.sqrt(2.0 / (h_in * m + h_out)), (h_out, h_in * m))
        self.weight = Tensor(to_device(w, np.float32), requires_grad=True)

    def forward(self, x, x0):
        return CINProduct().apply(x, x0, self.weight)


class CIN(Module):
    """The Compressed Interaction Network over ``m`` fields: ``forward(fields [B, m, D]) -> [B, 1]``.

    sizes: the feature maps H_k of each layer. Each layer's maps are sum-pooled over D into ``[B, H_k]``; a
    Linear maps their concatenation to the logit. No activation: the paper found the identity best on Criteo.
    """

    def __init__(self, m, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [CINLayer(h_in, m, h_out, rng) for h_in, h_out in zip((m, *sizes), sizes)]
        self.out = Linear(sum(sizes), 1, seed=int(rng.integers(2 ** 63)))

    def forward(self, fields):
        B, m, D = fields.shape
        x0 = fields.transpose(1, 0, 2).reshape(m, B * D)
        x, pooled = x0, []
        for layer in self.layers:
            x = layer(x, x0)
            pooled.append(x.reshape(x.shape[0], B, D).sum(axis=2))
        return self.out(concat(pooled, axis=0).transpose(1, 0))
