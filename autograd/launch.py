"""What every numba.cuda kernel launch needs: a grid size and the stream that CuPy is using.

It sits beside the backend, below every package that launches kernels (optim, gpuemb.kernels, gpuemb.store).
"""
from numba import cuda

from . import backend


def blocks_for(n, threads=256):
    """Blocks of ``threads`` that cover ``n`` threads (at least one, so an empty launch stays valid)."""
    return max(1, (int(n) + threads - 1) // threads)


def stream_for(array):
    """The numba view of CuPy's current stream for device arrays, so kernels order with CuPy's own work.

    Host arrays (the simulator's, or a test handing NumPy to a real GPU) get the default stream: numba copies
    them to the device and back around the launch.
    """
    if backend.is_device_array(array):
        return cuda.external_stream(backend.current_stream().ptr)
    return 0
