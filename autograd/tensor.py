"""Tensor: an array, whether it needs a gradient, and the Function that made it."""
import numpy

from . import backend


class Tensor:
    """Wraps a NumPy or CuPy array. ``.grad`` is filled by ``backward()`` on leaves that require a gradient.

    The array is kept as given (no copy, no move between devices): a NumPy array stays on the host even when a GPU
    was chosen, so one process can hold both. Lists and scalars become arrays of the chosen device.
    """

    __array_priority__ = 1000  # make `ndarray + Tensor` call Tensor.__radd__ rather than broadcast elementwise

    def __init__(self, data, requires_grad=False, name=None):
        if isinstance(data, Tensor):
            data = data.data
        if isinstance(data, numpy.generic):  # a NumPy reduction's scalar is host data, as its array would be
            data = numpy.asarray(data)
        elif not isinstance(data, numpy.ndarray) and not backend.is_device_array(data):
            data = backend.xp.asarray(data)
        self.data = data
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.creator = None  # the Function whose output this is; None for a leaf
        self.output_index = 0
        self.name = name

    # -- array facts --------------------------------------------------------------------------------------------
    @property
    def shape(self):
        return tuple(self.data.shape)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return int(self.data.size)

    @property
    def xp(self):
        return backend.get_array_module(self.data)

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        extra = ", requires_grad=True" if self.requires_grad else ""
        label = f", name={self.name!r}" if self.name else ""
        return f"Tensor(shape={self.shape}, dtype={self.dtype}{extra}{label})"

    # -- interchange: plain arrays in and out -------------------------------------------------------------------
    def numpy(self):
        """The data as a NumPy array (copied from the GPU if it lives there)."""
        return backend.to_host(self.data)

    def item(self):
        return self.data.item()

    def __dlpack__(self, *args, **kwargs):
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    @property
    def __cuda_array_interface__(self):
        return self.data.__cuda_array_interface__  # AttributeError on NumPy data, so hasattr() tells the truth

    # -- autograd -----------------------------------------------------------------------------------------------
    def backward(self, grad=None, on_ready=None):
        """Compute the gradient of this tensor with respect to every leaf that requires one; ``on_ready(leaf)`` is
        called as each leaf's gradient is complete (``function.backward``)."""
        from .function import backward
        backward(self, grad, on_ready)

    def detach(self):
        """The same data, cut off from the tape."""
        return Tensor(self.data, requires_grad=False, name=self.name)

    def zero_grad(self):
        self.grad = None

    # -- operators (the ops live in autograd/ops) ---------------------------------------------------------------
    def __add__(self, other):
        return _ops.add(self, other)

    def __radd__(self, other):
        return _ops.add(other, self)

    def __sub__(self, other):
        return _ops.sub(self, other)

    def __rsub__(self, other):
        return _ops.sub(other, self)

    def __mul__(self, other):
        return _ops.mul(self, other)

    def __rmul__(self, other):
        return _ops.mul(other, self)

    def __truediv__(self, other):
        return _ops.div(self, other)

    def __rtruediv__(self, other):
        return _ops.div(other, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pow__(self, exponent):
        return _ops.pow(self, exponent)

    def __rpow__(self, base):
        return _ops.pow(base, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    @property
    def T(self):
        return _ops.transpose(self)

    def sum(self, axis=None, keepdims=False):
        return _ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape):
        return _ops.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def transpose(self, *axes):
        return _ops.transpose(self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes or None)

    def relu(self):
        return _ops.relu(self)

    def sigmoid(self):
        return _ops.sigmoid(self)

    def tanh(self):
        return _ops.tanh(self)

    def exp(self):
        return _ops.exp(self)

    def log(self):
        return _ops.log(self)


from . import ops as _ops  # noqa: E402  (the ops build Tensors, and Tensor's operators call the ops)
