"""The GEMM floor of a DLRM training step: the step's MLP matmuls timed bare, as the issue's targets define it.

A step of a ``tools/bench_train.py`` config runs, per layer of ``in -> out`` at batch B, the forward
``x [B, in] @ W.T``, the input gradient ``g [B, out] @ W`` (not for the bottom MLP's first layer, whose input is
data) and the weight gradient over the batch. Here each runs alone on contiguous random operands, with the
weight gradient formed the way ``gpuemb/kernels/mlp.py`` forms it (the taller product), and the floor is the sum
of their median times: what the step would take if it did nothing but its matmuls. It leaves out the dot
interaction, the epilogues and the embeddings, so ``step / floor`` is the share of the step spent around the
GEMMs. NumPy's BLAS on the CPU; on a GPU the step's own floor is ``tools/gpu_floor.py``.
"""
import time

import numpy as np


def mlp_layers(bc, n_dense=13, n_tables=26, pad_to=8):
    """``(bottom, top)``: each MLP's widths, from its input to its output (the top's input padded to ``pad_to``)."""
    F = n_tables + 1
    width = -(-(bc.dim + F * (F - 1) // 2) // pad_to) * pad_to
    return [n_dense, *bc.bottom, bc.dim], [width, *bc.top, 1]


def _median_ms(fn, repeats):
    fn()  # BLAS warms its threads and buffers
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def gemm_floor_ms(bc, batch_size, repeats=5, seed=0, array=None):
    """The sum of the median times of a step's matmuls at ``batch_size`` (float32), in ms. ``array``: a function
    from a NumPy array to the array type whose ``@`` to time (``torch.from_numpy`` for a peer's BLAS, in the peer's
    own process: ``bench_peer.py``); NumPy's own by default."""
    rng = np.random.default_rng(seed)
    array = array or (lambda a: a)
    total = 0.0
    for m, sizes in enumerate(mlp_layers(bc)):
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            x, g, W = (array(rng.standard_normal(shape, dtype=np.float32))
                       for shape in ((batch_size, a), (batch_size, b), (b, a)))
            total += _median_ms(lambda: x @ W.T, repeats)
            if m or i:  # the bottom MLP's first layer needs no input gradient
                total += _median_ms(lambda: g @ W, repeats)
            total += _median_ms((lambda: x.T @ g) if a >= b else (lambda: g.T @ x), repeats)
    return total
