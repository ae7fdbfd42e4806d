"""The time of a training step under a plan, per rank: compute from a device profile, communication from a
modelled link, both under the data's key skew.

``estimate_step(plan, link, profile, skews, hot, dense_bytes)`` follows the collectives the sharded step makes
(``gpuemb/distributed/exchange.py``, single keys a feature), each on the link as ``gpuemb.comm.traffic`` puts it
(messages and bytes of its algorithm plus the header) and timed by ``Link.seconds``, so a rank's communication is
what a ``ModelledCommunicator`` over that link records as ``modelled_s``:

1. when a table is sharded: an alltoallv of the per-stream key counts (``S`` int64 to each peer), one of the keys
   (8 bytes a lookup), then per width of the streams one of the rows (forward) and one of their gradients
   (backward), each ``vector_bytes(width, codec)`` a vector; column shards under row-wise Adagrad add one of
   their per-key squared-gradient sums (float64 a unique key, to each other shard);
2. when a table is data-parallel: three allgathers, of the tables' key counts, of the keys, and of the gradient
   rows (float32, the widest dim);
3. hot rows replicated (``hot.py``; estimated only): one allreduce of their float32 gradients;
4. ``dense_bytes``: the dense layers' gradients, one allreduce per bucket of ``DENSE_BUCKET`` bytes;
5. the training loop's mean of the loss over the ranks: an allreduce of one float64 (``LOSS_BYTES``).

An alltoallv's bytes are the larger of what the rank sends and receives. Where requester ``i`` looks up a table
``b·L`` times (``b = B/W``), a shard with a share ``q`` of the lookups gets ``b·L·q`` keys from it and returns
``m`` vectors: one a key unpooled, ``min(b·L·q, b·(1 - (1 - q)^L))`` pooled (the cost model's count). ``q`` is 1
for a table- or column-wise shard and, row-wise, the owner's share under the skew (``KeySkew.owner_shares``: the
hottest key's owner carries it on top of an even part); the hot rows' share stays on the requester.

Compute on a rank: its shards gather one vector a lookup they serve (``N·d·itemsize``, pooled or not) at
``profile.gather_bps``, and update each unique row they hold, read and written whole (``U·2·row_bytes``), at
``profile.update_bps``. ``U`` is ``KeySkew.unique_rows(B·L, rows)`` (row-wise, a W-th of it on each owner: a hash
spreads distinct keys evenly), or without a skew the cost model's bound ``min(B·L, rows)``. A data-parallel table's
replica gathers its own ``b·L`` vectors and applies the global update. The step's time on a rank is compute plus
communication: every collective blocks today, so nothing overlaps (docs/comm.md, "The timeline").
"""
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpuemb.comm import traffic

from .cost import KEY_BYTES, row_bytes, unique_rows, vector_bytes
from .report import imbalance

DENSE_BUCKET = 4 << 20  # GradientAllreduce's default bucket
SUM_BYTES = 8  # a column shard's per-key sum of squared gradients, float64
GRAD_BYTES = 4  # gradients travel as float32
LOSS_BYTES = 8  # the loop's loss, a float64 averaged over the ranks every step (Cluster.mean)


@dataclass(frozen=True)
class RankTime:
    """One rank's estimated step: ``gather_bytes`` and ``update_bytes`` of compute, ``compute_s``; ``messages`` and
    ``link_bytes`` put on the link, ``comm_s``; ``sent`` bytes by tag (as ``comm_bytes_per_step`` counts them)."""
    gather_bytes: float
    update_bytes: float
    compute_s: float
    messages: int
    link_bytes: float
    comm_s: float
    sent: dict

    @property
    def total_s(self):
        return self.compute_s + self.comm_s


@dataclass(frozen=True)
class StepEstimate:
    """The estimate of every rank's step (``ranks``, a tuple of RankTime) over ``link`` on ``profile``."""
    link: object
    profile: object
    ranks: tuple
    hot: dict
    skew_note: str = ""

    @property
    def step_s(self):
        """The step's time: the slowest rank's, since the collectives wait for it."""
        return max(r.total_s for r in self.ranks)

    @property
    def imbalance(self):
        """max / mean of the ranks' total seconds (1.0: balanced)."""
        return imbalance(r.total_s for r in self.ranks)


class _Step:
    """The running sums of one estimate: per rank compute bytes, and per collective who sends whom what."""

    def __init__(self, W):
        self.W = W
        self.gather, self.update = np.zeros(W), np.zeros(W)
        self.keys, self.sums = np.zeros((W, W)), np.zeros((W, W))  # [from, to] bytes
        self.fwd, self.bwd = defaultdict(lambda: np.zeros((W, W))), defaultdict(lambda: np.zeros((W, W)))
        self.streams, self.coupled = 0, False
        self.dp_tables, self.dp_lookups, self.dp_width = 0, 0.0, 0
        self.hot_grad_bytes = 0.0

    def serve(self, spec, shard, q, unique, b, codec):
        """Shard ``shard`` of ``spec`` serves a share ``q`` of every rank's ``b·L`` lookups and holds ``unique``
        rows that the step updates."""
        L, d, r = spec.lookups_per_sample, shard.cols[1] - shard.cols[0], shard.rank
        self.gather[r] += self.W * b * L * q * d * spec.itemsize
        self.update[r] += unique * 2 * row_bytes(spec, d)
        m = b * L * q if spec.pooling is None else min(b * L * q, b * (1 - (1 - q) ** L))
        v = m * vector_bytes(d, codec)
        for i in range(self.W):
            if i != r:
                self.keys[i, r] += b * L * q * KEY_BYTES
                self.fwd[d][r, i] += v
                self.bwd[d][i, r] += v

    def collectives(self, r, dense_bytes):
        """``[(tag, (messages, bytes))]``: the collectives rank ``r`` makes, each by ``traffic``'s algorithm."""
        W, out = self.W, []

        def a2a(tag, m):  # m[from, to]: no rank sends to itself
            out.append((tag, traffic.alltoallv(W, m[r].sum(), m[:, r].sum()), m[r].sum()))

        if self.streams:
            counts = (W - 1) * self.streams * 8
            out.append(("a2a_keys", traffic.alltoallv(W, counts, counts), counts))
            a2a("a2a_keys", self.keys)
            for d in sorted(self.fwd, reverse=True):
                a2a("a2a_fwd", self.fwd[d])
            for d in sorted(self.bwd, reverse=True):
                a2a("a2a_bwd", self.bwd[d])
            if self.coupled:
                a2a("column_sums", self.sums)
        if self.dp_tables:
            for n in (self.dp_tables * 8, self.dp_lookups * 8, self.dp_lookups * self.dp_width * GRAD_BYTES):
                out.append(("dp_allgather", traffic.allgather(W, (W - 1) * n), n * (W - 1)))
        for tag, n in (("hot_allreduce", self.hot_grad_bytes), ("allreduce", dense_bytes)):
            for k in range(math.ceil(n / DENSE_BUCKET) if tag == "allreduce" else int(n > 0)):
                part = min(DENSE_BUCKET, n - k * DENSE_BUCKET) if tag == "allreduce" else n
                out.append((tag, traffic.allreduce(W, part), 2 * (W - 1) * part / W))
        out.append(("loss", traffic.allreduce(W, LOSS_BYTES), 2 * (W - 1) * LOSS_BYTES // W))
        return out


KINDS = ("table", "row", "column", "data")  # the placements the estimate follows


def _check(plan, link, profile, skews, hot, dense_bytes):
    names = {p.table.name for p in plan.placements}
    for p in plan.placements:
        if p.kind not in KINDS:
            raise ValueError(f"estimate_step: table {p.table.name!r} is placed {p.kind}, which the estimate does not "
                             f"follow yet; estimate plans of {', '.join(KINDS)} placements")
    for what, given in (("skews", skews), ("hot", hot)):
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"estimate_step: {what} name tables the plan does not have ({', '.join(unknown)}); "
                             f"it has {', '.join(sorted(names))}")
    for name, h in hot.items():
        if plan.placement(name).kind not in ("table", "row"):
            raise ValueError(f"estimate_step: hot rows of table {name!r}, which is {plan.placement(name).kind}-"
                             "wise; replicate hot rows of table- or row-wise tables only")
    if not (isinstance(dense_bytes, (int, float)) and dense_bytes >= 0):
        raise ValueError(f"estimate_step: dense_bytes={dense_bytes!r}; use bytes >= 0 (the dense gradients)")
    for obj in (link, profile):
        obj.validate()


def estimate_step(plan, link, profile, skews=None, hot=None, dense_bytes=0):
    """A ``StepEstimate`` of ``plan``'s step over ``link`` (a ``gpuemb.comm.link.Link``) on ``profile`` (a
    ``DeviceProfile``); ``skews``: ``{table: KeySkew}`` (absent: no skew known, the cost model's bounds); ``hot``:
    ``{table: HotRows}`` replicated on every rank (``hot.py``); ``dense_bytes``: the dense gradients allreduced a
    step. See the module docstring."""
    skews, hot = dict(skews or {}), dict(hot or {})
    _check(plan, link, profile, skews, hot, dense_bytes)
    W, B = plan.world_size, plan.batch_size
    b = B / W
    st = _Step(W)
    row_tables = 0
    for p in plan.placements:
        spec, skew = p.table, skews.get(p.table.name)
        L = spec.lookups_per_sample
        U = skew.unique_rows(B * L, spec.rows) if skew else unique_rows(spec, 1.0, spec.rows, B)
        if p.kind == "data":
            st.dp_tables, st.dp_lookups = st.dp_tables + 1, st.dp_lookups + b * L
            st.dp_width = max(st.dp_width, spec.dim)
            st.gather += b * L * spec.dim * spec.itemsize
            st.update += U * 2 * row_bytes(spec)
            continue
        h, hot_share = (hot[spec.name].rows, hot[spec.name].share) if spec.name in hot else (0, 0.0)
        if h:  # every replica serves its own lookups of the hot rows and applies their global update
            st.gather += b * L * hot_share * spec.dim * spec.itemsize
            st.update += min(h, U) * 2 * row_bytes(spec)
            st.hot_grad_bytes += h * spec.dim * GRAD_BYTES
            U = max(U - h, 0.0)
        if p.kind == "row":
            owners = (skew.owner_shares(spec.rows, W, row_tables % W, h) if skew else
                      np.full(W, (1 - hot_share) / W))
            row_tables += 1
            st.streams += 1
            for s in p.shards:
                st.serve(spec, s, owners[s.residue], U / W, b, plan.codec)
            continue
        st.streams += len(p.shards)
        for s in p.shards:
            st.serve(spec, s, 1 - hot_share, U, b, plan.codec)
        if p.kind == "column" and spec.rule == "RowwiseAdagradRule":
            st.coupled = True
            for s in p.shards:
                for t in p.shards:
                    if t.rank != s.rank:
                        st.sums[s.rank, t.rank] += U * SUM_BYTES
    ranks = []
    for r in range(W):
        colls = st.collectives(r, dense_bytes)
        sent = defaultdict(float)
        messages, nbytes, comm_s = 0, 0.0, 0.0
        for tag, payload, out in colls:
            m, n = traffic.with_header(W, payload)
            messages, nbytes, comm_s = messages + m, nbytes + n, comm_s + link.seconds(m, n)
            sent[tag] += out
        ranks.append(RankTime(float(st.gather[r]), float(st.update[r]),
                              profile.seconds(st.gather[r], st.update[r]), messages, nbytes, comm_s, dict(sent)))
    return StepEstimate(link, profile, tuple(ranks), hot, _skew_note(skews, len(plan.placements)))


def _skew_note(skews, n_tables):
    """A few words on the skews behind an estimate, for its report."""
    if not skews:
        return ""
    alphas = sorted(k.alpha for k in skews.values())
    span = f"{alphas[0]:.2f}" + (f" to {alphas[-1]:.2f}" if alphas[-1] != alphas[0] else "")
    sources = sorted({k.source.split(" of ")[0] if k.hot_keys else k.source for k in skews.values()})
    return f"key skew of {len(skews)} of {n_tables} tables: Zipf alpha {span}, {', '.join(sources)}"
