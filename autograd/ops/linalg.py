"""Matrix products: matmul (batched, broadcast) and linear, ``x·Wᵀ + b``."""
from ..function import Function, ShapeError
from .broadcast import broadcast_shape, unbroadcast


class MatMul(Function):
    """``a @ b`` for operands of two or more axes; leading (batch) axes broadcast."""

    def forward(self, a, b):
        if a.ndim < 2 or b.ndim < 2:
            raise ShapeError(f"matmul: the MatMul op takes operands of 2+ axes, got shapes {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not align "
                             f"({a.shape[-1]} columns against {b.shape[-2]} rows)")
        broadcast_shape("matmul (batch axes)", a[..., :1, :1], b[..., :1, :1])
        self.a, self.b = a, b
        return a @ b

    def backward(self, gy):
        need_a, need_b = self.needs_input_grad
        ga = unbroadcast(gy @ self.b.swapaxes(-1, -2), self.a.shape) if need_a else None
        gb = unbroadcast(self.a.swapaxes(-1, -2) @ gy, self.b.shape) if need_b else None
        return ga, gb


class Linear(Function):
    """``x·Wᵀ + b`` with ``x [..., in]``, ``W [out, in]`` (the layout of torch.nn.Linear), ``b [out]`` or None."""

    def forward(self, x, W, b=None):
        if W.ndim != 2 or x.shape[-1] != W.shape[1]:
            raise ShapeError(f"linear: input of shape {x.shape} does not fit weight of shape {W.shape} "
                             f"(want the input's last axis equal to the weight's axis 1)")
        if b is not None and tuple(b.shape) != (W.shape[0],):
            raise ShapeError(f"linear: bias of shape {b.shape} does not fit weight of shape {W.shape}")
        self.x, self.W = x, W
        y = x @ W.T
        return y if b is None else y + b

    def backward(self, gy):
        need_x, need_W = self.needs_input_grad[:2]
        gy2 = gy.reshape(-1, gy.shape[-1])
        gx = gy @ self.W if need_x else None
        gW = gy2.T @ self.x.reshape(-1, self.x.shape[-1]) if need_W else None
        gb = gy2.sum(axis=0) if len(self.needs_input_grad) > 2 and self.needs_input_grad[2] else None
        return (gx, gW, gb)[:len(self.needs_input_grad)]


def matmul(a, b):
    """``a @ b``; a 1-axis operand is treated as a row (first) or a column (second), as in NumPy."""
    from .shape import reshape
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    y = MatMul().apply(reshape(a, (1, -1)) if a_vec else a, reshape(b, (-1, 1)) if b_vec else b)
    if a_vec or b_vec:
        y = reshape(y, y.shape[:-2] + ((y.shape[-2],) if not a_vec else ()) + ((y.shape[-1],) if not b_vec else ()))
    return y


def linear(x, W, b=None):
    return Linear().apply(x, W) if b is None else Linear().apply(x, W, b)
