"""What the single-op benchmarks share: the shape of a benchmark row, so each op family can keep its cases in its
own file; a table whose columns stay in line; and a peer run in a process of its own.

``tools/bench_ops.py`` collects ``cases(xp, quick)`` from each ``tools/bench_*_cases.py`` module, times every
case the same way and prints one table.
"""
import json
import os
import subprocess
import sys
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


@dataclass(frozen=True)
class Column:
    """A column of a printed table: its ``title``, the row's ``key`` it shows, and ``spec``, a number's format
    (e.g. ".3f"; "" for text, left-aligned). ``width``: at least this many characters."""
    title: str
    key: str
    spec: str = ""
    width: int = 0

    def text(self, row):
        value = row.get(self.key)
        return "-" if value is None else format(value, self.spec)


class Table:
    """Columns as wide as their title, their ``width`` and every cell of ``rows`` (those known before printing:
    a cell wider than that later would push the line out), separated by two spaces."""

    def __init__(self, columns, rows=()):
        self.columns = columns
        self.widths = [max([len(c.title), c.width] + [len(c.text(r)) for r in rows]) for c in columns]

    def _join(self, cells):
        return "  ".join(format(cell, ("<" if not c.spec else ">") + str(w))
                         for cell, c, w in zip(cells, self.columns, self.widths)).rstrip()

    def header(self):
        return self._join([c.title for c in self.columns])

    def line(self, row):
        return self._join([c.text(row) for c in self.columns])


class PeerError(RuntimeError):
    """A peer's process that failed: its message is the process's last line."""


def run_apart(script, args, timeout=600):
    """The JSON object that ``tools/<script> args`` prints last, run in a process of its own: a peer timed in
    gpuemb's process shares the machine with numba's thread pool, which slowed torch by 14-25% there. Raises
    ``PeerError`` with its last line of stderr where it fails or runs past ``timeout`` seconds."""
    command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), script), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{script} ran past {timeout} s; give a smaller shape") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeerError(f"{script} exited {done.returncode}: {last}")
    return json.loads(lines[-1])
