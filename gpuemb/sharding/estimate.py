"""The time of a training step under a plan, per rank: compute from a device profile, communication from a
modelled link, both under the data's key skew.

``estimate_step(plan, link, profile, skews, hot, dense_bytes, local_link)`` follows the collectives the sharded
step makes (``gpuemb/distributed/exchange.py``, single keys a feature), each on the link as ``gpuemb.comm.traffic``
puts it (messages and bytes of its algorithm plus the header) and timed by ``Link.seconds``, so a rank's
communication is what a ``ModelledCommunicator`` over that link records as ``modelled_s``:

1. when a table is sharded: an alltoallv of the per-stream key counts (``S`` int64 to each peer), one of the keys
   (8 bytes a lookup, and for bags of several keys 8 a sub-bag, its length: ``cost.length_bytes``), then per
   width of the streams one of the rows (forward) and one of their gradients (backward), each
   ``vector_bytes(width, codec)`` a vector; column shards under row-wise Adagrad add one of their per-key
   squared-gradient sums (float64 a unique key, to each other shard);
2. when a table is data-parallel: three allgathers, of the tables' key counts, of the keys, and of the gradient
   rows (float32, the widest dim);
3. hot rows replicated (``hot.py``; estimated only): one allreduce of their float32 gradients;
4. ``dense_bytes``: the dense layers' gradients, one allreduce per bucket of the runtime's default size
   (``traffic.bucket_bytes``: a quarter of them, at most 4 MiB);
5. the training loop's mean of the loss over the ranks: an allreduce of one float64 (``LOSS_BYTES``).

An alltoallv's bytes are the larger of what the rank sends and receives. Where requester ``i`` looks up a table
``b·L`` times (``b = B/W``), a shard with a share ``q`` of the lookups gets ``b·L·q`` keys from it and returns
``m`` vectors: one a key unpooled, ``min(b·L·q, b·(1 - (1 - q)^L))`` pooled (the cost model's count). ``q`` is 1
for a table- or column-wise shard and, row-wise, the owner's share under the skew (``KeySkew.owner_shares``: the
hottest key's owner carries it on top of an even part); the hot rows' share stays on the requester. A 2-D
placement (``table_row``, ``grid``) is estimated as its column ranges, each row-wise over the ``n`` ranks of one
host (a share of ``1/n`` each, or the skew's over ``n`` residues); a grid under row-wise Adagrad adds the per-key
sums between the shards of one residue, as column shards do.

Pooled bags of keyed tables where the plan makes several hosts of several ranks (``hierarchical.relay_hosts``)
go by the two-level exchange (``gpuemb/distributed/host_relay.py``): an owner's partials for a requester on
another host go to that requester's relay on the owner's host (``m`` vectors, within the host), and the relay sends
the requester one vector a bag with a key on its host (``min(b·L·Q, b·(1 - (1 - Q)^L))``, ``Q`` the host's share
of the lookups, 1 for ``table_row`` and ``grid``), in a second alltoallv a width each way; the requester sends
the relay the recipe of its sub-bags there with the keys (``RECIPE_BYTES`` each, and a few counts the estimate
leaves out).

Deduplicated keys (``dedup``: ``--dedup-keys``, ``routing.py``): a requester sends each distinct single key once
to each shard, so a shard gets and returns ``min(b·L·q, D/n)`` keys and vectors from it, ``D`` the distinct keys
among a rank's ``b·L`` lookups (``KeySkew.unique_rows(b·L, rows)``, less the hot rows; without a skew the bound
``min(b·L, rows)``) and ``n`` the ranks its column range is spread over (a hash spreads distinct keys evenly), and
gathers that many. That is for tables priced as single keys (``cost.single_keys``: a pooled table of one lookup
a sample too); bags of several keys are estimated as without it, as the runtime sends them.

Hosts: where the plan states ``local_ranks`` and ``local_link`` is given, an alltoallv's peers on the rank's own
host are reached over ``local_link`` (e.g. NVLink) and the others over ``link`` (e.g. InfiniBand): each link
carries one message a peer on it and the larger of what the rank sends and receives over it, and since the two
links move data at once the collective takes the slower of the two. The header and the ring collectives
(allreduce, allgather) cross hosts, so their hops wait on ``link``, and stay there.

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

from .cost import KEY_BYTES, RECIPE_BYTES, length_bytes, row_bytes, single_keys, unique_rows, vector_bytes
from .hierarchical import relay_hosts
from .plan import HOST_KINDS
from .report import imbalance

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
    local_link: object = None  # the link within a host, where the plan's hosts were given one
    dedup: bool = False  # single keys sent once a rank (--dedup-keys)

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

    def __init__(self, W, near=None, relay=None):
        self.W, self.near = W, near  # near[r, p]: p is another rank of r's host, on the local link (None: no hosts)
        self.relay = relay  # the ranks of a host where pooled keyed partials go by relay, else None
        self.gather, self.update = np.zeros(W), np.zeros(W)
        self.keys, self.sums = np.zeros((W, W)), np.zeros((W, W))  # [from, to] bytes
        self.fwd, self.bwd = defaultdict(lambda: np.zeros((W, W))), defaultdict(lambda: np.zeros((W, W)))
        # the relay's second stage, between hosts: relay to requester, and back
        self.fwd2, self.bwd2 = defaultdict(lambda: np.zeros((W, W))), defaultdict(lambda: np.zeros((W, W)))
        self.streams, self.coupled = 0, False
        self.dp_tables, self.dp_lookups, self.dp_width = 0, 0.0, 0
        self.hot_grad_bytes = 0.0

    def serve(self, spec, shard, q, unique, b, codec, keyed=False, distinct=None):
        """Shard ``shard`` of ``spec`` serves a share ``q`` of every rank's ``b·L`` lookups and holds ``unique``
        rows that the step updates; ``keyed``: its owner depends on the key (its bags' partials may be relayed);
        ``distinct``: under dedup, the distinct keys each rank sends it (None: one a lookup)."""
        L, d, r = spec.lookups_per_sample, shard.cols[1] - shard.cols[0], shard.rank
        k = b * L * q if distinct is None else min(b * L * q, distinct)  # keys a requester sends
        self.gather[r] += self.W * k * d * spec.itemsize
        self.update[r] += unique * 2 * row_bytes(spec, d)
        m = k if spec.pooling is None else min(k, b * (1 - (1 - q) ** L))
        v = m * vector_bytes(d, codec)
        for i in range(self.W):
            if i != r:
                self.keys[i, r] += k * KEY_BYTES + m * length_bytes(spec)
                to = self._relay_of(i, r, spec) if keyed else i
                if to != i:
                    self.keys[i, to] += m * RECIPE_BYTES
                if to != r:
                    self.fwd[d][r, to] += v
                    self.bwd[d][to, r] += v

    def _relay_of(self, i, r, spec):
        """Where owner ``r`` sends its partials for requester ``i``: ``i``, or its relay on ``r``'s host."""
        H = self.relay
        return i if H is None or spec.pooling is None or i // H == r // H else r // H * H + i % H

    def relay_bags(self, spec, shards, shares, b, codec):
        """The second stage of a relayed column range ``shards`` (of ``shares`` of the lookups): each relay sends
        each requester of its local rank on another host one vector a bag with a key on the relay's host."""
        H = self.relay
        if H is None or spec.pooling is None:
            return
        L, d = spec.lookups_per_sample, shards[0].cols[1] - shards[0].cols[0]
        for h in sorted({s.rank // H for s in shards}):
            Q = sum(q for s, q in zip(shards, shares) if s.rank // H == h)
            v = min(b * L * Q, b * (1 - (1 - Q) ** L)) * vector_bytes(d, codec)
            for i in range(self.W):
                if i // H != h:
                    self.fwd2[d][h * H + i % H, i] += v
                    self.bwd2[d][i, h * H + i % H] += v

    def split(self, r, sent, received):
        """``(far, near)``: the (messages, bytes) of an alltoallv in which rank ``r`` sends ``sent[p]`` to each peer
        ``p`` and receives ``received[p]``, on ``link`` and on the local link (None without hosts)."""
        if self.near is None:
            return traffic.alltoallv(self.W, sent.sum(), received.sum()), None
        near = self.near[r]
        far = ~near
        far[r] = False
        return ((int(far.sum()), max(sent[far].sum(), received[far].sum())),
                (int(near.sum()), max(sent[near].sum(), received[near].sum())))

    def collectives(self, r, dense_bytes):
        """``[(tag, far, near, sent)]``: the collectives rank ``r`` makes, each's (messages, bytes) on ``link`` and
        on the local link (None: none there) by ``traffic``'s algorithm, and the bytes it sends."""
        W, out = self.W, []

        def a2a(tag, m):  # m[from, to]: no rank sends to itself
            out.append((tag, *self.split(r, m[r], m[:, r]), m[r].sum()))

        if self.streams:
            counts = np.full(W, self.streams * 8.0)
            counts[r] = 0
            out.append(("a2a_keys", *self.split(r, counts, counts), counts.sum()))
            a2a("a2a_keys", self.keys)
            for stage in (self.fwd, self.fwd2):
                for d in sorted(stage, reverse=True):
                    a2a("a2a_fwd", stage[d])
            for stage in (self.bwd, self.bwd2):
                for d in sorted(stage, reverse=True):
                    a2a("a2a_bwd", stage[d])
            if self.coupled:
                a2a("column_sums", self.sums)
        if self.dp_tables:
            for n in (self.dp_tables * 8, self.dp_lookups * 8, self.dp_lookups * self.dp_width * GRAD_BYTES):
                out.append(("dp_allgather", traffic.allgather(W, (W - 1) * n), None, n * (W - 1)))
        for tag, n in (("hot_allreduce", self.hot_grad_bytes), ("allreduce", dense_bytes)):
            bucket = traffic.bucket_bytes(n) if tag == "allreduce" else n
            for k in range(math.ceil(n / bucket) if n > 0 else 0):
                part = min(bucket, n - k * bucket)
                out.append((tag, traffic.allreduce(W, part), None, 2 * (W - 1) * part / W))
        out.append(("loss", traffic.allreduce(W, LOSS_BYTES), None, 2 * (W - 1) * LOSS_BYTES // W))
        return out


def _check(plan, link, profile, skews, hot, dense_bytes, local_link):
    names = {p.table.name for p in plan.placements}
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
    for obj in (link, profile, local_link):
        if obj is not None:
            obj.validate()


def _near(plan, local_link):
    """``[W, W]``: whether two distinct ranks share a host whose ranks talk over ``local_link``; None where the
    plan states no hosts or no local link is given."""
    L, W = plan.local_ranks, plan.world_size
    if local_link is None or L is None:
        return None
    host = np.arange(W) // L
    return (host[:, None] == host[None, :]) & ~np.eye(W, dtype=bool)


def estimate_step(plan, link, profile, skews=None, hot=None, dense_bytes=0, local_link=None, dedup=False):
    """A ``StepEstimate`` of ``plan``'s step over ``link`` (a ``gpuemb.comm.link.Link``) on ``profile`` (a
    ``DeviceProfile``); ``skews``: ``{table: KeySkew}`` (absent: no skew known, the cost model's bounds); ``hot``:
    ``{table: HotRows}`` replicated on every rank (``hot.py``); ``dense_bytes``: the dense gradients allreduced a
    step; ``local_link``: the link between the ranks of one host (``plan.local_ranks``), None: every peer over
    ``link``; ``dedup``: single keys sent once a rank (``--dedup-keys``). See the module docstring."""
    skews, hot = dict(skews or {}), dict(hot or {})
    _check(plan, link, profile, skews, hot, dense_bytes, local_link)
    W, B = plan.world_size, plan.batch_size
    b = B / W
    near = _near(plan, local_link)
    if near is not None and plan.local_ranks == W:
        link, near = local_link, None  # one host: every peer is on the local link
    st = _Step(W, near, relay_hosts(plan.local_ranks, W))
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
        ranges = sorted({s.cols for s in p.shards})
        D = None
        if dedup and single_keys(spec):  # the distinct keys of a rank's lookups, the hot ones kept home
            D = max((skew.unique_rows(b * L, spec.rows) if skew else min(b * L, spec.rows)) - h, 0.0)
        if p.kind == "row" or p.kind in HOST_KINDS:  # each column range row-wise over its n ranks
            n = len(p.shards) // len(ranges)
            owners = (skew.owner_shares(spec.rows, n, row_tables % n, h) if skew else
                      np.full(n, (1 - hot_share) / n))
            row_tables += 1
            st.streams += len(ranges)
            for s in p.shards:
                st.serve(spec, s, owners[s.residue], U / n, b, plan.codec, keyed=True,
                         distinct=None if D is None else D / n)
            for cols in ranges:
                part = [s for s in p.shards if s.cols == cols]
                st.relay_bags(spec, part, [owners[s.residue] for s in part], b, plan.codec)
        else:
            n = 1
            st.streams += len(p.shards)
            for s in p.shards:
                st.serve(spec, s, 1 - hot_share, U, b, plan.codec, distinct=D)
        if p.kind in ("column", "grid") and len(ranges) > 1 and spec.rule == "RowwiseAdagradRule":
            st.coupled = True  # the shards of one residue, one a column range, add up each key's sums
            for s in p.shards:
                for t in p.shards:
                    if t.rank != s.rank and t.residue == s.residue:
                        st.sums[s.rank, t.rank] += U / n * SUM_BYTES
    ranks = []
    for r in range(W):
        colls = st.collectives(r, dense_bytes)
        sent = defaultdict(float)
        messages, nbytes, comm_s = 0, 0.0, 0.0
        for tag, far, close, out in colls:
            m, n = traffic.with_header(W, far)
            seconds = link.seconds(m, n)
            if close is not None:  # the two links move at once: the slower one sets the collective's time
                seconds = max(seconds, local_link.seconds(*close))
                m, n = m + close[0], n + close[1]
            messages, nbytes, comm_s = messages + m, nbytes + n, comm_s + seconds
            sent[tag] += out
        ranks.append(RankTime(float(st.gather[r]), float(st.update[r]),
                              profile.seconds(st.gather[r], st.update[r]), messages, nbytes, comm_s, dict(sent)))
    return StepEstimate(link, profile, tuple(ranks), hot, _skew_note(skews, len(plan.placements)),
                        local_link if near is not None else None, dedup)


def _skew_note(skews, n_tables):
    """A few words on the skews behind an estimate, for its report."""
    if not skews:
        return ""
    alphas = sorted(k.alpha for k in skews.values())
    span = f"{alphas[0]:.2f}" + (f" to {alphas[-1]:.2f}" if alphas[-1] != alphas[0] else "")
    sources = sorted({k.source.split(" of ")[0] if k.hot_keys else k.source for k in skews.values()})
    return f"key skew of {len(skews)} of {n_tables} tables: Zipf alpha {span}, {', '.join(sources)}"
