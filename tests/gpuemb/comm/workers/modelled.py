"""Run under ``mpiexec -n W`` by test_modelled_mpi.py: the mpi backend over a modelled link gives the backend's own
results, and records for each collective the messages, bytes and time that traffic.py's tables say, and waits them.

``comm.init(link=...)`` wraps the backend; a second wrapper of the same backend on a manual clock checks the
waits exactly. Each rank's data comes from a generator seeded by (seed, rank), uneven between ranks. With a second
argument, ``hosts``, the job runs under ``GPUEMB_LOCAL_RANKS``: ``comm.init(local_link=nvlink4)`` puts the
alltoallv's peers on this rank's host on NVLink and the rest on ib100, as ``gpuemb.sharding.estimate`` splits
them. A failed check raises, which aborts the job; success prints "rank R: ok".
"""
import math
import os
import sys

import numpy as np

from gpuemb import comm
from gpuemb.comm import LINK_PRESETS, ModelledCommunicator, traffic
from gpuemb.distributed.hosts import LOCAL_RANKS_ENV
from gpuemb.sharding.estimate import _Step
from gpuemb.comm.modelled import ManualClock, WallClock

SEED = int(sys.argv[1])
HOSTS = sys.argv[2:] == ["hosts"]


def collectives(c, rng):
    """Each collective of ``c`` on this rank's fresh data; ``[(op, result, expected (messages, bytes))]``."""
    W, r = c.world_size, c.rank
    rows = rng.standard_normal((int(rng.integers(W, 3 * W)), 3))  # float64: 24 bytes a row
    counts = np.bincount(rng.integers(0, W, len(rows)), minlength=W)
    recv, recv_counts = c.alltoallv(rows, counts)
    a2a_bytes = 24 * max(counts.sum() - counts[r], recv_counts.sum() - recv_counts[r])
    x = rng.standard_normal((2 * W, 5)).astype(np.float32)  # the same shape on every rank: 40 W bytes
    n = x.nbytes
    parts = rng.standard_normal((r + 1, 2))  # rank r has r + 1 rows of 16 bytes
    return [("alltoallv", (recv, recv_counts), (W - 1, a2a_bytes)),
            ("allreduce", c.allreduce(x), (2 * (W - 1), 2 * (W - 1) * n // W)),
            ("reduce_scatter", c.reduce_scatter(x, op="max"), (W - 1, (W - 1) * n // W)),
            ("allgather", c.allgather(parts), (W - 1, 16 * (W * (W + 1) // 2 - (r + 1)))),
            ("broadcast", c.broadcast(x, root=W - 1), ((W - 1).bit_length(), (W - 1).bit_length() * n)),
            ("barrier", c.barrier(), (0, 0))]


def same(a, b):
    if isinstance(a, tuple):
        return all(same(u, v) for u, v in zip(a, b))
    return a is b is None or np.array_equal(a, b)


def over_hosts(c, rng):
    """With hosts: the alltoallv's span against the estimate's split of the same rows (``_Step.split``)."""
    W, r, L = c.world_size, c.rank, int(os.environ[LOCAL_RANKS_ENV])
    rows = rng.standard_normal((int(rng.integers(W, 3 * W)), 3))  # float64: 24 bytes a row
    counts = np.bincount(rng.integers(0, W, len(rows)), minlength=W)
    c.reset_bytes()
    _, recv_counts = c.alltoallv(rows, counts)
    c.reset_bytes()
    span, = c.timeline()[0].spans
    host = np.arange(W) // L
    step = _Step(W, (host[:, None] == host[None, :]) & ~np.eye(W, dtype=bool))
    far, near = step.split(r, 24 * counts, 24 * recv_counts)
    far = traffic.with_header(W, far)
    assert (span.messages, span.nbytes) == (far[0] + near[0], far[1] + near[1]), (span, far, near)
    assert span.modelled_s == max(LINK_PRESETS["ib100"].seconds(*far), LINK_PRESETS["nvlink4"].seconds(*near))


if __name__ == "__main__":
    if HOSTS:
        c = comm.init("mpi", link="ib100", local_link="nvlink4")
        L = int(os.environ[LOCAL_RANKS_ENV])
        assert c.name == f"mpi over ib100 between hosts of {L}, nvlink4 within", c.name
        over_hosts(c, np.random.default_rng([SEED, c.rank]))
        print(f"rank {c.rank}: ok", flush=True)
        sys.exit(0)
    wall = comm.init("mpi", link="ib100")
    assert isinstance(wall, ModelledCommunicator) and isinstance(wall.clock, WallClock), wall
    assert wall.name == "mpi over ib100" and wall.world_size > 1
    W, r = wall.world_size, wall.rank
    header = W - 1, (W - 1) * (8 + W) * 8
    clock = ManualClock()
    for c in (wall, ModelledCommunicator(wall.inner, comm.LINK_PRESETS["nvlink4"], clock)):
        c.reset_bytes()
        ours = collectives(c, np.random.default_rng([SEED, r]))
        theirs = collectives(c.inner, np.random.default_rng([SEED, r]))
        c.reset_bytes()
        spans = c.timeline()[0].spans
        assert [s.op for s in spans] == [op for op, _, _ in ours], spans
        for s, (op, result, (m, b)), (_, real, _) in zip(spans, ours, theirs):
            assert same(result, real), op  # the real collective's result, unchanged
            assert (s.messages, s.nbytes) == (m + header[0], b + header[1]), (op, s)
            assert s.modelled_s == c.link.seconds(s.messages, s.nbytes), (op, s)
        summary = c.step_summary()
        assert summary["steps"] == 1 and math.isclose(summary["exposed_comm_s"], summary["comm_s"]), summary
    assert clock.waits == [s.issued + s.modelled_s for s in spans], (clock.waits, spans)
    assert all(s.done == max(s.returned, s.issued + s.modelled_s) for s in spans), spans
    print(f"rank {r}: ok", flush=True)
