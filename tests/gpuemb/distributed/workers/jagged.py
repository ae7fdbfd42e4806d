"""Run by test_jagged_sharding.py under ``mpiexec -n W``: sharded collections of pooled bags, each rank on its 1/W
of a global batch, against one ``EmbeddingCollection`` on the whole batch, in this process.

argv: a seed. For every placement (table, row, column, data) and pooling (sum, weighted sum, mean, max): fresh
jagged batches (lengths 0 to 5, Zipf-ish keys that repeat across ranks); every step's forward rows, then after the
steps every row (weights, state, steps) of every shard this rank holds, and an eval forward on unseen keys. Then
a shared table fed (keys, offsets) bags, and a DLRM of fixed hotness through ``distribute``. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import D, check_rows, placement
from gpuemb import comm, models, optim
from gpuemb.autograd import Tensor, bce_with_logits, no_grad
from gpuemb.distributed import ShardedEmbeddingCollection, distribute
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.sharding import Plan, RankBudget
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

SEED, G, STEPS, TOL = int(sys.argv[1]), 16, 3, 1e-5
RULES = [(optim.RowwiseAdagradRule(), 0.1), (optim.SGDRule(), 0.5), (optim.AdagradRule(), 0.1),
         (optim.AdamRule(), 0.01)]
NAMES = tuple(f"f{i}" for i in range(4))


def configs():
    return [TableConfig(f"t{i}", D, "float32", Initializer("uniform", seed=i + 1), rule, lr)
            for i, (rule, lr) in enumerate(RULES)]


def plan_of(kind, W, tables):
    return Plan((RankBudget(1 << 30),) * W, tuple(placement(c, kind, W, i) for i, c in enumerate(tables)), 64,
                "fp32")


def jagged(rng, F, weighted, offset=0):
    """G samples of F features: bags of 0 to 5 keys from a Zipf-ish range (so keys repeat within and across
    ranks), weights in (0, 2) where ``weighted``."""
    lengths = rng.integers(0, 6, (F, G))
    values = (rng.zipf(1.3, int(lengths.sum())) % 40) + offset
    weights = rng.uniform(0, 2, values.size).astype(np.float32) if weighted else None
    return JaggedFeatures.from_lengths(NAMES[:F], values, lengths, weights)


def check_collection(kind, mode, weighted, c, rank, mine):
    W = c.world_size
    rng = np.random.default_rng([SEED, ["table", "row", "column", "data"].index(kind),
                                 ["sum", "mean", "max"].index(mode), int(weighted)])
    tables = configs()
    the_plan = plan_of(kind, W, tables)
    ref = EmbeddingCollection(tables, mode=mode)
    dist = ShardedEmbeddingCollection(tables, c, the_plan, mode=mode)
    where = f"rank {rank}: {kind}-wise, mode {mode}{' weighted' if weighted else ''}"
    for _ in range(STEPS):
        batch = jagged(rng, 4, weighted)
        want, got = ref(batch), dist(batch[mine])
        np.testing.assert_allclose(got.data, want.data[mine], rtol=TOL, atol=TOL / 10, err_msg=where)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy[mine] * np.float32(W))  # each rank's loss is its part's mean: the exchange divides by W
    sent = dist.comm_bytes()
    assert W == 1 or kind == "data" or sent["a2a_fwd"] > 0 and sent["a2a_bwd"] > 0, (where, sent)
    check_rows({t.config.name: t for t in ref.tables}, dist.shards, the_plan, rank, TOL)
    ref.eval(), dist.eval()
    batch = jagged(rng, 4, weighted, offset=1000)  # keys no table has seen: read as their initial weights
    with no_grad():
        want, got = ref(batch).data[mine], dist(batch[mine]).data
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL / 10, err_msg=where + ", eval")
    assert all(len(s.table) == len(ref.tables[int(n[1:])]) for n, s in dist.shards.items() if s.kind != "row")


def check_int8_partials(c, rank, mine):
    """Row-wise mean bags under the int8 forward codec: each partial is decoded before the requester adds them, so
    each is off by at most half a step of its row's scale."""
    rng = np.random.default_rng([SEED, 9])
    tables = configs()
    the_plan = plan_of("row", c.world_size, tables)
    ref = EmbeddingCollection(tables, mode="mean")
    dist = ShardedEmbeddingCollection(tables, c, the_plan, comm.CommCodecs(forward="int8"), mode="mean")
    batch = jagged(rng, 4, False)
    want, got = ref(batch).data[mine], dist(batch[mine]).data
    bound = np.abs(want).max() / 254 * c.world_size + 1e-6
    assert np.abs(got - want).max() <= bound, (rank, np.abs(got - want).max(), bound)
    assert np.abs(got - want).max() > 0 or c.world_size == 1  # the codec was on the wire


def check_shared_table_of_bags(c, rank, mine):
    """Three features sharing one row-wise table, fed a list of (keys, offsets, weights) bags."""
    rng = np.random.default_rng([SEED, 7])
    config = configs()[0]
    the_plan = plan_of("row", c.world_size, [config])
    ref = EmbeddingCollection(config, n_features=3)
    dist = ShardedEmbeddingCollection(config, c, the_plan, n_features=3)
    for _ in range(STEPS):
        batch = jagged(rng, 3, True)
        part = batch[mine]
        want, got = ref([batch.feature(f) for f in range(3)]), dist([part.feature(f) for f in range(3)])
        np.testing.assert_allclose(got.data, want.data[mine], rtol=TOL, atol=TOL / 10, err_msg=f"rank {rank}: shared")
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy[mine] * np.float32(c.world_size))
    check_rows({config.name: ref.tables[0]}, dist.shards, the_plan, rank, TOL)


def check_dlrm_of_fixed_hotness(c, rank, mine):
    """A DLRM pooling by mean over hotness (2, 1, 3, 2), row-wise but for a data-parallel last table, through
    ``distribute``: dense parameters and rows against one process."""
    W, hotness = c.world_size, (2, 1, 3, 2)
    rng = np.random.default_rng([SEED, 8])
    build = lambda: models.build("dlrm", 4, configs(), seed=5, bottom=(16,), top=(16,), hotness=hotness,  # noqa
                                 pooling="mean")
    ref, dist = build(), build()
    the_plan = Plan((RankBudget(1 << 30),) * W, tuple(placement(t, "data" if i == 3 else "row", W, i)
                                                      for i, t in enumerate(configs())), 64, "fp32")
    allreduce = distribute(dist, c, the_plan)
    assert dist.embeddings.hotness == hotness and dist.embeddings.mode == "mean"
    opt_ref, opt_dist = optim.Adagrad(ref.parameters(), 0.05), optim.Adagrad(dist.parameters(), 0.05)
    for _ in range(STEPS):
        dense = rng.standard_normal((G, 4)).astype(np.float32)
        sparse, y = rng.zipf(1.3, (G, sum(hotness))) % 40, rng.integers(0, 2, G).astype(np.float32)
        for model, opt, part, done in ((ref, opt_ref, slice(None), None), (dist, opt_dist, mine, allreduce)):
            opt.zero_grad()
            bce_with_logits(model(dense[part], sparse[part]), Tensor(y[part])).backward()
            if done:
                done()
            opt.step()
    for (name, p), (_, q) in zip(ref.named_parameters(), dist.named_parameters()):
        np.testing.assert_allclose(q.data, p.data, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}: dense {name}")
    check_rows({t.config.name: t for t in ref.embeddings.tables}, dist.embeddings.shards, the_plan, rank, TOL)


def main():
    c = comm.init()
    W, rank = c.world_size, c.rank
    mine = slice(rank * G // W, (rank + 1) * G // W)
    for kind in ("table", "row", "column", "data"):
        for mode, weighted in (("sum", False), ("sum", True), ("mean", False), ("max", False)):
            check_collection(kind, mode, weighted, c, rank, mine)
    check_int8_partials(c, rank, mine)
    check_shared_table_of_bags(c, rank, mine)
    check_dlrm_of_fixed_hotness(c, rank, mine)
    print(f"rank {rank}: ok", flush=True)


main()
