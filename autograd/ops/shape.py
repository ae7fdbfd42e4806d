"""Ops that move data without arithmetic: reshape, transpose, concat, split, indexing and row gathers."""
import numpy

from ..backend import aligned_empty, get_array_module, is_device_array, scatter_add
from ..function import Function, ShapeError
from ..tensor import Tensor


class Reshape(Function):
    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, x):
        self.in_shape = x.shape
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ShapeError(f"reshape: cannot reshape {x.shape} ({x.size} elements) to {self.shape}") from None

    def backward(self, gy):
        return gy.reshape(self.in_shape)


class Transpose(Function):
    def __init__(self, axes=None):
        self.axes = axes

    def forward(self, x):
        axes = tuple(range(x.ndim))[::-1] if self.axes is None else tuple(a % x.ndim for a in self.axes)
        if sorted(axes) != list(range(x.ndim)):
            raise ShapeError(f"transpose: axes {self.axes} are not a permutation of the {x.ndim} axes of {x.shape}")
        self.inverse = tuple(numpy.argsort(axes))
        return x.transpose(axes)

    def backward(self, gy):
        return gy.transpose(self.inverse)


class Concat(Function):
    def __init__(self, axis=0):
        self.axis = axis

    def forward(self, *xs):
        axis = self.axis % xs[0].ndim
        for x in xs[1:]:
            if x.ndim != xs[0].ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != axis):
                raise ShapeError(f"concat: shapes {xs[0].shape} and {x.shape} differ outside axis {self.axis}")
        self.sizes = [x.shape[axis] for x in xs]
        xp = get_array_module(*xs)
        if xp is not numpy:
            return xp.concatenate(xs, axis=axis)
        shape = list(xs[0].shape)
        shape[axis] = sum(self.sizes)  # aligned: a collection's [B, F, D] goes to other stacks by DLPack
        return numpy.concatenate(xs, axis=axis, out=aligned_empty(shape, numpy.result_type(*xs)))

    def backward(self, gy):
        xp = get_array_module(gy)
        return tuple(xp.split(gy, numpy.cumsum(self.sizes)[:-1].tolist(), axis=self.axis))


class Split(Function):
    """Cuts ``x`` along ``axis`` into pieces of the given sizes, which must add up to the axis' length."""

    def __init__(self, sizes, axis=0):
        self.sizes, self.axis = [int(s) for s in sizes], axis

    def forward(self, x):
        if sum(self.sizes) != x.shape[self.axis]:
            raise ShapeError(f"split: sizes {self.sizes} add up to {sum(self.sizes)}, "
                             f"but axis {self.axis} of {x.shape} has length {x.shape[self.axis]}")
        xp = get_array_module(x)
        return tuple(xp.split(x, numpy.cumsum(self.sizes)[:-1].tolist(), axis=self.axis))

    def backward(self, *gys):
        return get_array_module(*gys).concatenate(gys, axis=self.axis)


def _is_advanced(index):
    parts = index if isinstance(index, tuple) else (index,)
    return any(not isinstance(p, (int, slice, type(None), type(Ellipsis))) for p in parts)


class GetItem(Function):
    """``x[index]`` with basic (ints, slices) or advanced (integer arrays, masks) indexing."""

    def __init__(self, index):
        self.index = index

    def forward(self, x):
        self.shape, self.dtype = x.shape, x.dtype
        try:
            return x[self.index]
        except IndexError as e:
            raise ShapeError(f"getitem: index {self.index!r} does not fit shape {x.shape}: {e}") from None

    def backward(self, gy):
        gx = get_array_module(gy).zeros(self.shape, self.dtype)
        if _is_advanced(self.index):
            scatter_add(gx, self.index, gy)  # repeated indices accumulate
        else:
            gx[self.index] = gy
        return gx


class Take(Function):
    """Gathers entries of ``x`` along ``axis`` by integer ``indices`` (any shape): ``xp.take``."""

    def __init__(self, indices, axis=0):
        self.indices, self.axis = indices, axis

    def forward(self, x):
        self.shape, self.dtype = x.shape, x.dtype
        self.axis = self.axis % x.ndim
        n = x.shape[self.axis]
        idx = self.indices
        # Device indices are not checked: that would read them back and wait for the stream (the callers make
        # them in range, as embedding_bag's slots).
        if idx.size and not is_device_array(idx) and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise ShapeError(f"take: indices span [{int(idx.min())}, {int(idx.max())}], "
                             f"outside axis {self.axis} of length {n} in shape {x.shape}")
        return get_array_module(x).take(x, idx, axis=self.axis)

    def backward(self, gy):
        xp = get_array_module(gy)
        pre, n = int(numpy.prod(self.shape[:self.axis])), self.shape[self.axis]
        gx = xp.zeros((pre, n, int(numpy.prod(self.shape[self.axis + 1:]))), self.dtype)
        idx = self.indices.reshape(-1) % n
        scatter_add(gx, (slice(None), idx), gy.reshape(pre, idx.size, -1))
        return gx.reshape(self.shape)


def _data(a):
    return a.data if isinstance(a, Tensor) else a


def reshape(x, shape):
    return Reshape(shape).apply(x)


def transpose(x, axes=None):
    return Transpose(axes).apply(x)


def concat(xs, axis=0):
    return Concat(axis).apply(*xs)


def split(x, sizes_or_sections, axis=0):
    """Split along ``axis`` into a list of sizes, or into that many equal pieces when given an int."""
    n = x.shape[axis]
    if isinstance(sizes_or_sections, int):
        if n % sizes_or_sections:
            raise ShapeError(f"split: axis {axis} of {x.shape} does not divide into {sizes_or_sections} equal pieces")
        sizes_or_sections = [n // sizes_or_sections] * sizes_or_sections
    out = Split(sizes_or_sections, axis).apply(x)
    return list(out) if isinstance(out, tuple) else [out]


def getitem(x, index):
    index = tuple(_data(i) for i in index) if isinstance(index, tuple) else _data(index)
    return GetItem(index).apply(x)


def slice_axis(x, start, stop, axis=0):
    """``x[start:stop]`` along ``axis``."""
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return GetItem(tuple(index)).apply(x)


def take(x, indices, axis=0):
    """Rows (or entries along ``axis``) of ``x`` at ``indices``; the gradient sums over repeated indices."""
    xp = get_array_module(_data(x))
    return Take(xp.asarray(_data(indices)), axis).apply(x)
