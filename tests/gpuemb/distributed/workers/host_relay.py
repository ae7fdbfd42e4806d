"""Run by test_host_relay.py under ``mpiexec -n 4`` with ``GPUEMB_LOCAL_RANKS=2`` (2 hosts of 2): the two-level
exchange of keyed partials (``gpuemb/distributed/host_relay.py``) against the single-level one on the same plan.

argv: a seed, then ``small`` for the emulated device's short run (the grid by sum, 8 samples), or for a
measurement DIM HOT G KEYS (below). For table-row-wise, grid and row-wise tables (three tables of three rules),
and a mixed plan (a table-wise table's rows beside the relayed ones in one all-to-all, and a column-wise table),
bags pooled by sum, weighted sum, mean and max, over 2 steps of a global batch whose bags hold up to 8 keys:
- the relayed forward is the single-level one's bits (row-wise sums: within 1e-6, as their sums run in another
  order), and the relayed one over an ``OverlappedCommunicator`` is the blocking one's bits;
- after the steps, every row of every shard is the same bits in all three;
- the bytes each rank sent to the other host under ``a2a_fwd`` and ``a2a_bwd`` are exactly one row a (bag, host)
  for the relayed exchange and one a (bag, owner) single-level, counted from the global batch by hand; the
  relayed key exchange sends exactly its recipes more (``a2a_keys``); and the rows between hosts are fewer
  relayed. Rank 0 prints each case's bytes between hosts a step, rows and keys, relayed and single-level.
With DIM HOT G KEYS: the same checks, by sum only, with every table of dim DIM, bags of 0 to HOT keys drawn from
KEYS, a global batch of G (docs/perf/README.md, "The two-level exchange"). Prints "rank R: ok".
"""
import sys
from collections import Counter

import numpy as np

from gpuemb import comm, optim
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.comm import OverlappedCommunicator
from gpuemb.comm.base import row_bytes
from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.distributed.hosts import local_ranks
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.sharding import Placement, Plan, RankBudget, Shard
from gpuemb.sharding.hierarchical import plan_hosts, table_row_placement
from gpuemb.sharding.spec import TableSpec
from gpuemb.store.options import Initializer, TableConfig

SEED = int(sys.argv[1])
G, STEPS, KEYS, HOT = 16, 2, 40, 8
DIMS = (8, 8, 6)
CASES = (("sum", False), ("sum", True), ("mean", False), ("max", False))
KINDS = ("table_row", "grid", "row", "mixed")
if sys.argv[2:] == ["small"]:  # the emulated device's run: the grid by sum, 8 samples (sum and max took 103 s)
    G, KINDS, CASES = 8, ("grid",), CASES[:1]
elif len(sys.argv) > 2:  # a measurement: every table of DIM, bags of up to HOT keys, a global batch of G, sum only
    DIM, HOT, G, KEYS = map(int, sys.argv[2:6])
    DIMS, CASES = (DIM,) * 3, CASES[:1]
RULES = (optim.RowwiseAdagradRule(), optim.AdamRule(), optim.AdagradRule())


def configs():
    return [TableConfig(f"t{i}", d, "float32", Initializer("uniform", seed=i + 1), rule, 0.05)
            for i, (d, rule) in enumerate(zip(DIMS, RULES))]


def plan_of(kind, W, L):
    """All three tables ``kind``; or ``mixed``: t0 table-row-wise on host 0, t1 table-wise on the last rank, in t0's
    group of rows (its width), and t2 column-wise over ranks 1 and 2, a group of its own."""
    specs = [TableSpec.from_config(cfg, KEYS, sharding="table_row" if kind in ("row", "mixed") else kind)
             for cfg in configs()]
    if kind in ("table_row", "grid"):
        return plan_hosts(specs, W, L, kind, 64)
    if kind == "row":
        placed = tuple(Placement(s, "row", tuple(Shard(r, KEYS, (0, s.dim), residue=r) for r in range(W)))
                       for s in specs)
    else:
        t0, t1, t2 = specs
        half = t2.dim // 2
        placed = (table_row_placement(t0, 0, L), Placement(t1, "table", (Shard(W - 1, KEYS, (0, t1.dim)),)),
                  Placement(t2, "column", (Shard(1, KEYS, (0, half)), Shard(2, KEYS, (half, t2.dim)))))
    return Plan((RankBudget(1 << 30),) * W, placed, 64, "fp32", L)


def batch(rng, weighted):
    lengths = rng.integers(0, HOT + 1, (3, G))
    lengths[:, ::5] = 0
    values = rng.integers(0, KEYS, int(lengths.sum()))
    weights = rng.uniform(0, 2, values.size).astype(np.float32) if weighted else None
    return JaggedFeatures.from_lengths(["a", "b", "c"], values, lengths, weights)


class Recording:
    """``inner``, counting the bytes that each tag's all-to-alls send to the ranks of other hosts."""

    def __init__(self, inner, L):
        self.inner, self.L, self.remote = inner, L, Counter()

    def alltoallv(self, send, send_counts, tag="alltoallv"):
        other = np.arange(self.inner.world_size) // self.L != self.inner.rank // self.L
        self.remote[tag] += int(np.asarray(send_counts)[other].sum()) * row_bytes(send)
        return self.inner.alltoallv(send, send_counts, tag)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def expected_remote(dist, jagged, me, L, W, relayed):
    """``(a2a_fwd, a2a_bwd, sub-bags)`` that rank ``me`` sends to the other host in one step, by hand: forward, the
    bytes of the rows it returns (a relay: one a bag of a requester of its local rank elsewhere with a key on its
    host; an owner: one a bag with a key of its own, or every bag of a table- or column-wise shard); backward,
    those of the gradient rows of its own bags (one a host elsewhere holding a key of the bag; one an owner
    elsewhere); and how many keyed sub-bags it sends there."""
    fwd = bwd = subs = 0
    host = np.arange(W) // L
    for st in dist.streams:
        relay = relayed and st.keyed  # table- and column-wise rows go straight to their requester
        for p in range(W):
            part = jagged[slice(p * G // W, (p + 1) * G // W)]
            values, offsets, _ = part.feature(st.table)
            owners = st.owners(values)
            for b in range(offsets.size - 1):
                mine = owners[offsets[b]:offsets[b + 1]] if st.keyed else np.array([st.rank])
                where = set((host[mine] if relay else mine).tolist())
                if p == me:
                    subs += int((host[np.unique(mine)] != me // L).sum()) if st.keyed else 0
                    bwd += 4 * st.width * len(where - ({me // L} if relay else set(np.flatnonzero(host == me // L))))
                elif host[p] != host[me] and (me // L in where if relay else me in where):
                    fwd += 4 * st.width * (not relay or p % L == me % L)
    return fwd, bwd, subs


def run(kind, mode, weighted, c, L):
    rng = np.random.default_rng([SEED, len(kind), len(mode), int(weighted)])
    the_plan = plan_of(kind, c.world_size, L)
    relayed, single = Recording(c, L), Recording(c, L)
    overlapped = OverlappedCommunicator(c)
    dists = [ShardedEmbeddingCollection(configs(), x, the_plan, mode=mode, mixed_dims=True)
             for x in (relayed, single, overlapped)]
    dists[1].relay = None  # the single-level exchange on the same plan
    assert dists[0].relay.L == L
    mine = slice(c.rank * G // c.world_size, (c.rank + 1) * G // c.world_size)
    where = f"rank {c.rank}: {kind}, {mode}{' weighted' if weighted else ''}"
    want = Counter()
    tags, start = [], overlapped.start
    overlapped.start = lambda op, *args: tags.append(args[2] if op == "alltoallv" else op) or start(op, *args)
    for _ in range(STEPS):
        jagged = batch(rng, weighted)
        tags.clear()
        ys = [d(jagged[mine]) for d in dists]
        # overlapped, stage 1 is waited for in the forward and stage 2 (between hosts) started before it returns
        fwd = len(dists[2].groups) + len(dists[2].relay.groups)
        assert tags.count("a2a_fwd") == fwd, f"{where}: {tags.count('a2a_fwd')} a2a_fwd started, not {fwd}"
        out = [to_host(y.data) for y in ys]
        if kind == "row" and mode != "max":
            np.testing.assert_allclose(out[0], out[1], rtol=1e-6, atol=1e-7, err_msg=where)
        else:
            assert np.array_equal(out[0], out[1]), f"{where}: the relayed forward is not the single-level bits"
        assert np.array_equal(out[0], out[2]), f"{where}: the overlapped relayed forward moved"
        gy = rng.standard_normal(out[0].shape).astype(np.float32)
        for d, y in zip(dists, ys):
            y.backward(to_device(gy))
            d.settle()
        overlapped.drain()
        for relay in (True, False):
            fwd, bwd, subs = expected_remote(dists[0], jagged, c.rank, L, c.world_size, relay)
            want[relay, "a2a_fwd"] += fwd
            want[relay, "a2a_bwd"] += bwd
        # the recipe: a count column in the head to each peer elsewhere, then the counts of each group and owner
        # there and a place a sub-bag, to the one relay elsewhere
        others = c.world_size - L
        want[True, "a2a_keys"] += 8 * (others + L * len(dists[0].groups) + subs)
    recipes = relayed.remote["a2a_keys"] - single.remote["a2a_keys"]
    assert recipes == want[True, "a2a_keys"], f"{where}: the recipes took {recipes} B, not {want[True, 'a2a_keys']}"
    for relay, rec in ((True, relayed), (False, single)):
        for tag in ("a2a_fwd", "a2a_bwd"):
            assert rec.remote[tag] == want[relay, tag], (f"{where}: {'relayed' if relay else 'single-level'} sent "
                                                         f"{rec.remote[tag]} B of {tag} to the other host, not "
                                                         f"{want[relay, tag]}")
    rows = [r.remote["a2a_fwd"] + r.remote["a2a_bwd"] for r in (relayed, single)]
    sums = c.allreduce(np.array(rows + [r.remote["a2a_keys"] for r in (relayed, single)], np.int64))
    assert sums[0] < sums[1], f"{where}: relayed {sums[0]} B of rows between hosts, single-level {sums[1]} B"
    for name in dists[0].shards:
        tables = [d.shards[name].table.export() for d in dists]
        for a, b, o in zip(*tables):
            for x, y, z in zip(a, b, o):
                assert np.array_equal(x, y) and np.array_equal(x, z), f"{where}: table {name}'s rows differ"
    return sums // STEPS


def main():
    c = comm.init()
    L = local_ranks(c)
    for kind in KINDS:
        for mode, weighted in CASES:
            sums = run(kind, mode, weighted, c, L)
            if c.rank == 0:
                print(f"{kind} {mode}{' weighted' if weighted else ''}, bytes between hosts a step: rows "
                      f"{sums[0]} relayed, {sums[1]} single-level; keys {sums[2]} relayed, {sums[3]} single-level",
                      flush=True)
    print(f"rank {c.rank}: ok", flush=True)


main()
