"""How numba CPU kernels here split a batch for ``prange``: in chunks, so per-chunk scratch is allocated once."""
import numba


def chunk_size(n):
    """Items per parallel chunk: a few chunks per thread, so threads that start late still share the work."""
    return max(1, -(-int(n) // (8 * numba.get_num_threads())))

