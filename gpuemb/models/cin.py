"""The Compressed Interaction Network of xDeepFM (Lian et al. 2018): explicit, vector-wise feature crosses.

Layer k over the m fields ``X0``: ``Xk[h] = Σ_{i,j} W_k[h, i, j] · (X_{k-1}[i] ⊙ X0[j])``, every product taken
along the embedding axis D. Written over the batch it is one matrix product per layer:
``Xk = W_k · Z`` with ``Z[(i, j), n] = X_{k-1}[i, n] · X0[j, n]``, where the column ``n`` runs over (sample, d).

Layout: the fields are kept feature-major, ``[m, B·D]``, so ``Z`` is ``[H·m, B·D]`` and the product is a single
wide GEMM with ``W_k [H_out, H·m]`` (the sample-major layout would be B tiny matrix products). ``Z`` is the
bulk of the work: ``H·m`` times the fields' size, 0.23 GB a layer at B=4096, m=27, D=16, H=32. So
:class:`CINProduct` never keeps it: it builds ``Z`` a slab of columns at a time, small enough to stay in cache
(a CPU's L2, a slice of a GPU's memory), multiplies, and in the backward builds each slab again for ``dW``. The
recompute costs one elementwise pass per slab and saves writing and re-reading all of ``Z`` from memory.
"""
import numpy as np

from gpuemb.autograd import Function, Tensor, concat
from gpuemb.autograd.backend import get_array_module, is_device_array, to_device
from gpuemb.nn import Linear, Module

SLAB_BYTES = {False: 2 << 20, True: 256 << 20}  # Z's slab: host (an L2's worth), device (a slice of memory)


def _slabs(n, rows, itemsize, on_device):
    """Column ranges ``[start, stop)`` of ``n`` columns, each slab of ``Z`` (``rows`` rows) within budget."""
    width = max(1, SLAB_BYTES[on_device] // max(1, rows * itemsize))
    return [(s, min(n, s + width)) for s in range(0, n, width)]


class CINProduct(Function):
    """``W [H_out, H·m] · Z`` for ``x [H, N]`` and ``x0 [m, N]`` with ``Z[(i, j), n] = x[i, n] · x0[j, n]``."""

    def forward(self, x, x0, W):
        H, N = x.shape
        m = x0.shape[0]
        if x0.shape[1] != N or W.shape[1] != H * m:
            raise ValueError(f"CINProduct: x {x.shape}, x0 {x0.shape} and W {W.shape} do not fit (want "
                             f"x [H, N], x0 [m, N], W [H_out, H·m])")
        xp = get_array_module(x)
        self.x, self.x0, self.W = x, x0, W
        self.slabs = _slabs(N, H * m, x.dtype.itemsize, is_device_array(x))
        y = xp.empty((W.shape[0], N), x.dtype)
        for s, e in self.slabs:
            y[:, s:e] = W @ self._z(s, e)
        return y

    def _z(self, s, e):
        x, x0 = self.x[:, s:e], self.x0[:, s:e]
        return (x[:, None, :] * x0[None, :, :]).reshape(-1, e - s)

    def backward(self, gy):
        xp = get_array_module(gy)
        x, x0, W = self.x, self.x0, self.W
        H, m = x.shape[0], x0.shape[0]
        need_x, need_x0, need_W = self.needs_input_grad
        gx = xp.empty_like(x) if need_x else None
        gx0 = xp.empty_like(x0) if need_x0 else None
        gW = xp.zeros_like(W) if need_W else None
        for s, e in self.slabs:
            g = gy[:, s:e]
            if need_W:
                gW += g @ self._z(s, e).T
            if need_x or need_x0:
                gz = (W.T @ g).reshape(H, m, e - s)
                if need_x:
                    gx[:, s:e] = (gz * x0[None, :, s:e]).sum(axis=1)
                if need_x0:
                    gx0[:, s:e] = (gz * x[:, None, s:e]).sum(axis=0)
        return gx, gx0, gW


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
