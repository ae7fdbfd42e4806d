"""The arithmetic of tools/bench_scaling.py's projection: one training step on N GPUs in nodes of G, from a
per-GPU compute rate and the bytes and messages a rank puts on a two-level link. Pure functions, no timing.

A link moves ``m`` messages of ``b`` bytes in ``m·α + b/β`` (``gpuemb/comm/link.py``). Within a node the GPUs talk
over NVLink (``intra``), between nodes each GPU over its own InfiniBand adapter (``inter``, one NIC a GPU, as in
a DGX H100). With ``m = N / G`` nodes:

- an all-to-all in which a rank sends ``S`` bytes, equal parts to its ``N − 1`` peers, sends ``G − 1`` of the parts
  over NVLink and ``N − G`` over InfiniBand, both at once, so the slower link bounds it:
  ``t_a2a = max((G−1)·c·α_nv + S·(G−1)/(N−1)/β_nv, (N−G)·c·α_ib + S·(N−G)/(N−1)/β_ib)``
  for ``c`` collectives;
- an allreduce of ``n`` bytes is hierarchical, its phases one after the other: a ring reduce-scatter and allgather
  within the node, and a ring allreduce of each GPU's ``n/G`` share between the nodes:
  ``t_ar = c·2(G−1)·α_nv + 2(G−1)/G·n/β_nv + c·2(m−1)·α_ib + 2(m−1)/m·(n/G)/β_ib``;
- every collective first sends its header (``gpuemb/comm/traffic.py``: a ring allgather of ``(8 + N)·8`` bytes a
  rank, ``N − 1`` messages), counted as one all-to-all more of those bytes: ``t_h``;
- compute is ``t_c = (B/N) / R``, ``R`` the samples per second of one GPU, taken as the same at any batch;
- communication is ``t_comm = t_a2a + t_h + t_ar``, and the step ``t_c + t_comm`` with no overlap (every
  collective blocks, as today) and ``max(t_c, t_comm)`` with perfect overlap: the two bounds.
"""
from dataclasses import dataclass


def alltoall_seconds(nbytes, collectives, gpus, node, intra, inter):
    """``t_a2a``: ``collectives`` all-to-alls in which a rank sends ``nbytes`` in all (module docstring)."""
    if gpus == 1:
        return 0.0
    near, far = min(node, gpus) - 1, max(gpus - node, 0)
    t_intra = near * collectives * intra.latency_s + nbytes * near / (gpus - 1) / intra.bandwidth
    t_inter = far * collectives * inter.latency_s + nbytes * far / (gpus - 1) / inter.bandwidth
    return max(t_intra, t_inter)


def allreduce_seconds(nbytes, collectives, gpus, node, intra, inter):
    """``t_ar``: ``collectives`` hierarchical allreduces of ``nbytes`` in all (module docstring)."""
    g = min(node, gpus)
    nodes = gpus // g
    t = 2 * (g - 1) * collectives * intra.latency_s + 2 * (g - 1) / g * nbytes / intra.bandwidth
    if nodes > 1:
        t += 2 * (nodes - 1) * collectives * inter.latency_s + 2 * (nodes - 1) / nodes * nbytes / g / inter.bandwidth
    return t


@dataclass(frozen=True)
class Projection:
    """One step on ``gpus`` GPUs, in seconds: ``compute_s`` per GPU; ``a2a_s``, ``headers_s`` and ``allreduce_s``
    on the link."""
    gpus: int
    batch_size: int
    compute_s: float
    a2a_s: float
    headers_s: float
    allreduce_s: float

    @property
    def comm_s(self):
        return self.a2a_s + self.headers_s + self.allreduce_s

    @property
    def no_overlap_s(self):
        """The step when all communication is exposed: compute, then communication."""
        return self.compute_s + self.comm_s

    @property
    def overlap_s(self):
        """The step when communication hides entirely behind compute, or compute behind it."""
        return max(self.compute_s, self.comm_s)


def project(gpus, batch_size, samples_per_s, a2a, headers, allreduce, node, intra, inter):
    """The ``Projection`` of a step of ``batch_size`` samples (global) on ``gpus`` GPUs of ``samples_per_s`` each.

    ``a2a``, ``headers``, ``allreduce``: ``(bytes, collectives)`` a rank sends in the step's all-to-alls, its
    collectives' headers and its allreduces."""
    return Projection(gpus, batch_size, batch_size / gpus / samples_per_s,
                      alltoall_seconds(*a2a, gpus, node, intra, inter),
                      alltoall_seconds(*headers, gpus, node, intra, inter),
                      allreduce_seconds(*allreduce, gpus, node, intra, inter))
