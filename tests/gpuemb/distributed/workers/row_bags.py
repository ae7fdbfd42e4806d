"""Run by test_row_bags.py under ``mpiexec -n W``: row-wise tables of pooled bags, each rank on its 1/W of a global
batch, against one ``EmbeddingCollection`` on the whole batch, and the bytes on the wire against the cost model.

argv: a seed, then ``small`` for the short run of the emulated device. For sum, weighted sum, mean and max, on
batches holding empty bags and bags whose keys all live on one owner: every forward, then every row of every
shard. Bytes, per step of a row-wise table: what each rank sent under each tag, exactly what the cost model's
terms give for the keys and bags it routed (8 bytes a key, ``vector_bytes`` a row or gradient of a bag with a key
in the owner's shard; plus the bookkeeping the model leaves out: 8 bytes a sub-bag's length, S + 1 counts a
peer), in fp32 and int8; over a large batch of fixed hotness, the model's own estimate of the rows a step; and a
table shared by 26 features, planned by ``plan_for``, against the model's rows a step (one a feature, unpooled).
Prints "rank R: ok".
"""
import sys

import numpy as np

from common import D, check_rows, placement
from gpuemb import comm, optim
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.distributed import ShardedEmbeddingCollection, plan_for
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.sharding.cost import KEY_BYTES, length_bytes, placement_costs, vector_bytes
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

SEED, SMALL = int(sys.argv[1]), sys.argv[2:] == ["small"]
G, STEPS, TOL = (6, 1, 1e-5) if SMALL else (24, 3, 1e-5)
NAMES = ("f0", "f1")


def configs():
    return [TableConfig("t0", D, "float32", Initializer("uniform", seed=1), optim.AdagradRule(), 0.1),
            TableConfig("t1", D, "float32", Initializer("uniform", seed=2), optim.SGDRule(), 0.5)]


def row_plan(W, tables):
    return Plan((RankBudget(1 << 30),) * W, tuple(placement(c, "row", W) for c in tables), 64, "fp32")


def batch(rng, the_plan, weighted):
    """G samples of two features: bags of 0 to 5 keys, a third of them empty or with every key on one owner."""
    W = the_plan.world_size
    lengths = rng.integers(0, 6, (2, G))
    lengths[:, ::3] = 0
    values = rng.zipf(1.3, int(lengths.sum())) % 50
    one_owner = np.repeat((np.arange(G) % 3 == 1)[None], 2, axis=0).ravel()
    at = np.repeat(one_owner, lengths.ravel())
    owner = rng.integers(0, W)
    keys = np.flatnonzero(the_plan.owner_of("t0", np.arange(200)) == owner)  # t0 and t1 hash keys alike
    values[at] = rng.choice(keys, int(at.sum()))
    weights = rng.uniform(0, 2, values.size).astype(np.float32) if weighted else None
    return JaggedFeatures.from_lengths(NAMES, values, lengths, weights)


def check_equal_to_one_process(mode, weighted, c, mine):
    rng = np.random.default_rng([SEED, ["sum", "mean", "max"].index(mode), int(weighted)])
    tables = configs()
    the_plan = row_plan(c.world_size, tables)
    ref, dist = EmbeddingCollection(tables, mode=mode), ShardedEmbeddingCollection(tables, c, the_plan, mode=mode)
    where = f"rank {c.rank}: row-wise, mode {mode}{' weighted' if weighted else ''}"
    for _ in range(STEPS):
        jagged = batch(rng, the_plan, weighted)
        want, got = ref(jagged), dist(jagged[mine])
        np.testing.assert_allclose(to_host(got.data), to_host(want.data)[mine], rtol=TOL, atol=TOL / 10,
                                   err_msg=where)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(to_device(gy))
        got.backward(to_device(gy[mine] * np.float32(c.world_size)))
    check_rows({t.config.name: t for t in ref.tables}, dist.shards, the_plan, c.rank, TOL)


def routed(jagged, the_plan, W, rank):
    """``(keys [W], bags [W])`` that ``rank`` sends each owner: its part's keys there, and its bags with a key
    there (a bag holding several of an owner's keys counts once)."""
    part = jagged[slice(rank * G // W, (rank + 1) * G // W)]
    keys, bags = np.zeros(W, np.int64), np.zeros(W, np.int64)
    for f, name in enumerate(("t0", "t1")):
        values, offsets, _ = part.feature(f)
        owner = the_plan.owner_of(name, values)
        keys += np.bincount(owner, minlength=W)
        bag = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        bags += np.bincount(np.unique(owner * G + bag) // G, minlength=W)
    return keys, bags


def check_bytes(codec, weighted, c):
    """Each tag's bytes of one step equal the cost model's terms for what was routed."""
    W, rank = c.world_size, c.rank
    rng = np.random.default_rng([SEED, 5, int(weighted)])
    tables = configs()
    the_plan = row_plan(W, tables)
    dist = ShardedEmbeddingCollection(tables, c, the_plan, comm.CommCodecs(codec, codec))
    jagged = batch(rng, the_plan, weighted)
    dist.comm_bytes()  # the earlier checks' bytes
    out = dist(jagged[slice(rank * G // W, (rank + 1) * G // W)])
    out.backward(to_device(np.ones(out.shape, np.float32)))
    sent = dist.comm_bytes()
    mine = routed(jagged, the_plan, W, rank)
    others = [routed(jagged, the_plan, W, q) for q in range(W)]
    peers = [p for p in range(W) if p != rank]
    row = vector_bytes(D, codec)
    # a2a_keys: the keys, their weights two to an int64 word (the last padded), the lengths, and the head
    want = {"a2a_keys": sum(mine[0][p] * KEY_BYTES + weighted * 8 * ((mine[0][p] + 1) // 2) + mine[1][p] * 8
                            + (2 + 1) * 8 for p in peers),
            "a2a_fwd": sum(others[q][1][rank] for q in peers) * row,
            "a2a_bwd": sum(mine[1][p] for p in peers) * row}
    got = {tag: sent[tag] for tag in want}
    assert got == want, (rank, codec, weighted, got, want)
    assert sent["a2a_fwd"] > 0 or W == 1, (rank, sent)


def check_model_estimate(c):
    """Fixed hotness 3, keys drawn from a million: the gradient rows a step are the model's ``b·(1 − (1 − 1/W)^3)``
    a peer, within 3% (the bags are random)."""
    W, rank, L = c.world_size, c.rank, 3
    B = 4000 * W
    rng = np.random.default_rng([SEED, 6])
    table = configs()[0]
    spec = TableSpec.from_config(table, 1 << 20, lookups_per_sample=L)
    row = Placement(spec, "row", tuple(Shard(r, 1 << 20, (0, D), residue=r) for r in range(W)))
    dist = ShardedEmbeddingCollection(table, c, Plan((RankBudget(1 << 30),) * W, (row,), B, "fp32"), n_features=1,
                                      hotness=(L,))
    dist.comm_bytes()
    out = dist(rng.integers(0, 1 << 20, (B, L))[rank * B // W:(rank + 1) * B // W])
    out.backward(to_device(np.ones(out.shape, np.float32)))
    sent, model = dist.comm_bytes(), placement_costs(row, W, B, "fp32")[rank]
    assert abs(sent["a2a_bwd"] / model.a2a_bwd - 1) < 0.03, (rank, sent, model)
    # the model counts the keys and the sub-bags' lengths in a2a_fwd; the exchange sends them under a2a_keys
    b, q = B / W, 1 / W
    keys = (W - 1) * (b * L * q * KEY_BYTES + min(b * L * q, b * (1 - (1 - q) ** L)) * length_bytes(spec))
    assert abs(sent["a2a_fwd"] / (model.a2a_fwd - keys) - 1) < 0.03, (rank, sent, model)
    # and those, with a head of two int64 a peer (the stream's count, whether weights follow), under a2a_keys
    assert W == 1 or abs(sent["a2a_keys"] / (keys + (W - 1) * 16) - 1) < 0.03, (rank, sent, keys)


def check_shared_table(c):
    """One table shared by F = 26 one-hot features as ``plan_for`` plans it: each feature's row and gradient travel
    on their own, so every rank's ``a2a_fwd`` (less the keys, which the model counts there) and ``a2a_bwd`` are the
    model's within 3% (the keys are random; table-wise they are exact). Pooled, the model counted a 26th of them."""
    W, rank, F = c.world_size, c.rank, 26
    B = 200 * W
    table = configs()[0]
    the_plan = plan_for([table], W, n_features=F, batch_size=B)
    p = the_plan.placements[0]
    dist = ShardedEmbeddingCollection(table, c, the_plan, n_features=F)
    dist.comm_bytes()
    rng = np.random.default_rng([SEED, 7])
    out = dist(rng.integers(0, 1 << 20, (B, F))[rank * B // W:(rank + 1) * B // W])
    out.backward(to_device(np.ones(out.shape, np.float32)))
    sent, model = dist.comm_bytes(), placement_costs(p, W, B, "fp32")[rank]
    q = 1 / len(p.shards) if p.kind == "row" else 1.0
    keys = sum(B / W * F * q * KEY_BYTES for s in p.shards if s.rank != rank)
    for got, want in ((sent.get("a2a_fwd", 0), model.a2a_fwd - keys), (sent.get("a2a_bwd", 0), model.a2a_bwd)):
        assert abs(got - want) <= 0.03 * want, (rank, p.kind, sent, model)
    assert model.a2a_fwd + model.a2a_bwd > 0 or W == 1, (rank, p.kind, model)


def main():
    c = comm.init()
    W, rank = c.world_size, c.rank
    mine = slice(rank * G // W, (rank + 1) * G // W)
    for mode, weighted in (("sum", False), ("sum", True), ("mean", False), ("max", False)):
        check_equal_to_one_process(mode, weighted, c, mine)
    if not SMALL:
        for codec, weighted in (("fp32", False), ("fp32", True), ("int8", False)):
            check_bytes(codec, weighted, c)
        check_model_estimate(c)
        check_shared_table(c)
    print(f"rank {rank}: ok", flush=True)


main()
