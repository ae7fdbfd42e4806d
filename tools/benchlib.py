"""The shared shape of a benchmark row, so each op family can keep its cases in its own file.

``tools/bench_ops.py`` collects ``cases(xp, quick)`` from each ``tools/bench_*_cases.py`` module, times every
case the same way and prints one table.
"""
from dataclasses import dataclass
from typing import Callable, Optional


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
