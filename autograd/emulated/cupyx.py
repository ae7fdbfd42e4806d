"""``cupyx`` of the emulated device: the two functions the project uses."""
import numpy as np

from .array import count_scatter, ndarray, operand


def scatter_add(a, slices, value):
    """``a[slices] += value``, repeated indices accumulated, on a device array: one launch, counted as an
    assignment's."""
    if not isinstance(a, ndarray):
        raise TypeError(f"cupyx.scatter_add: want a device array, got {type(a).__name__}")
    slices = operand(slices, "cupyx.scatter_add")
    np.add.at(a._a, slices, operand(value, "cupyx.scatter_add"))
    count_scatter(a._a, slices)


def empty_pinned(shape, dtype=np.float32, order="C"):
    """A host array (page-locked on a GPU): a NumPy array, as CuPy's is."""
    return np.empty(shape, dtype=dtype, order=order)


def zeros_pinned(shape, dtype=np.float32, order="C"):
    return np.zeros(shape, dtype=dtype, order=order)
