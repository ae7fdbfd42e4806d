"""``cupyx`` of the emulated device: the two functions the project uses."""
import numpy as np

from .array import ndarray, operand


def scatter_add(a, slices, value):
    """``a[slices] += value``, repeated indices accumulated, on a device array."""
    if not isinstance(a, ndarray):
        raise TypeError(f"cupyx.scatter_add: want a device array, got {type(a).__name__}")
    np.add.at(a._a, operand(slices, "cupyx.scatter_add"), operand(value, "cupyx.scatter_add"))


def empty_pinned(shape, dtype=np.float32, order="C"):
    """A host array (page-locked on a GPU): a NumPy array, as CuPy's is."""
    return np.empty(shape, dtype=dtype, order=order)


def zeros_pinned(shape, dtype=np.float32, order="C"):
    return np.zeros(shape, dtype=dtype, order=order)
