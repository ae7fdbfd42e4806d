"""The product of one Compressed Interaction Network layer (xDeepFM; the layer is ``gpuemb/models/cin.py``).

For ``x [H, N]`` and ``x0 [m, N]`` (fields feature-major, the column ``n`` running over (sample, d)) and
``W [H_out, H·m]``: ``y = W · Z`` with ``Z[(i, j), n] = x[i, n] · x0[j, n]``, one wide GEMM per layer.

``Z`` is the bulk of the work: ``H·m`` times the fields' size, 0.23 GB a layer at B=4096, m=27, D=16, H=32. So
:class:`CINProduct` never keeps it: it builds ``Z`` a slab of columns at a time, small enough to stay in cache
(a CPU's L2, a slice of a GPU's memory), multiplies, and in the backward builds each slab again for ``dW``. The
recompute costs one elementwise pass per slab and saves writing and re-reading all of ``Z`` from memory.

- ``cin_product_ref``: NumPy, one einsum;
- ``CINProduct``: the slabbed product and its backward, written once with ``xp``: the matmuls are BLAS or cuBLAS
  through ``@`` and each slab is one broadcast product, so no kernel of our own would pay.
"""
import numpy as np

from gpuemb.autograd import Function
from gpuemb.autograd.backend import get_array_module, is_device_array

SLAB_BYTES = {False: 2 << 20, True: 256 << 20}  # Z's slab: host (an L2's worth), device (a slice of memory)


def cin_product_ref(x, x0, W):
    """``[H_out, N]``: ``Σ_{i,j} W[h, i·m + j] · x[i, n] · x0[j, n]`` for ``x [H, N]``, ``x0 [m, N]``."""
    H, m = x.shape[0], x0.shape[0]
    return np.einsum("hij,in,jn->hn", W.reshape(-1, H, m), x, x0)


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
