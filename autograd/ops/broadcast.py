"""Shape checks and the reduction of a broadcast gradient back to its input's shape."""
import numpy

from ..function import ShapeError


def shape_of(a):
    return tuple(getattr(a, "shape", ()))


def broadcast_shape(op, *operands):
    """The shape that ``op`` broadcasts its operands to, or a ShapeError naming the op and the shapes."""
    shapes = [shape_of(a) for a in operands]
    try:
        return numpy.broadcast_shapes(*shapes)
    except ValueError:
        raise ShapeError(f"{op}: shapes {' and '.join(map(str, shapes))} cannot be broadcast together") from None


def unbroadcast(g, shape):
    """Sum ``g`` over the axes that broadcasting added or stretched, so it has ``shape``."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    g = g.sum(axis=axes, keepdims=True) if axes else g
    return g.reshape(shape)


def normalize_axes(axis, ndim):
    """``axis`` (None, an int or a tuple, negatives allowed) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim if ndim else 0 for a in axes))
