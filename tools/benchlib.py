"""The shared shape of a benchmark row, so each op family can keep its cases in its own file.

``tools/bench_ops.py`` collects ``cases(xp, quick)`` from each ``tools/bench_*_cases.py`` module, times every
case the same way and prints one table.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from gpuemb.autograd.backend import to_host


@dataclass(frozen=True)
class Case:
    """One benchmark row.

    op: what is measured, e.g. "dot_interaction fwd+bwd".
    shape: the shape in words, e.g. "B=2048 F=26 D=16".
    run: a no-argument callable that runs the gpuemb op once on prepared inputs.
    bytes: bytes that the op must move at least (reads plus writes), for GB/s; or None.
    flops: floating-point operations, for GFLOP/s; or None. Give bytes, flops or both.
    torch_run: the same op in plain torch on the same inputs, or None where torch is absent or has no peer.
    """

    op: str
    shape: str
    run: Callable[[], object]
    bytes: Optional[int] = None
    flops: Optional[int] = None
    torch_run: Optional[Callable[[], object]] = None


def peer(xp):
    """(torch, its device name) where torch imports, else (None, None): the peer that cases time beside ours. On a
    device it is torch's GPU, and none where torch has no CUDA (the emulated device on a CPU build)."""
    try:
        import torch
    except ImportError:
        return None, None
    if xp.__name__ == "numpy":
        return torch, "cpu"
    return (torch, "cuda") if torch.cuda.is_available() else (None, None)


def arrays(xp, rng, *shapes):
    """Standard normal float32 arrays of ``shapes`` on ``xp``, drawn from ``rng``."""
    return [xp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]


def leaf(torch, device, a):
    """A torch leaf that requires a gradient, holding a copy of ``a``."""
    return torch.as_tensor(to_host(a), device=device).requires_grad_()
