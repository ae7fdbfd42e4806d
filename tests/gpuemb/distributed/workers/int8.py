"""Run by test_mpi.py under ``mpiexec -n W``: the collection's all-to-alls in int8, both ways, against exact rows.

Four SGD tables (row-, table-, column-wise, data-parallel); every key of the global batch occurs once, so each
row's forward error and its update's error come from one int8 round trip each: at most ``absmax / 254`` of the
row that travelled (a column shard's slice, or the gradient row). Also checks the bytes each rank counts: the rows
it sends other ranks, ``width + 4`` bytes each. Prints "rank R: ok".
"""
import sys

import numpy as np

from common import D, placement
from gpuemb import comm, optim
from gpuemb.comm import CommCodecs
from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.sharding import Plan, RankBudget
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

SEED, B, LR = int(sys.argv[1]), 6, 0.5
KINDS = ["row", "table", "column", "data"]


def inputs(rank):
    """Rank ``rank``'s keys [B, 4], all distinct over the ranks, and the gradient it feeds back [B, 4, D]."""
    rng = np.random.default_rng([SEED, rank])
    keys = rank * 10_000 + rng.permutation(1000)[:B * 4].reshape(B, 4)
    return keys, (rng.standard_normal((B, 4, D)) * 10.0 ** rng.uniform(-2, 1, (B, 4, 1))).astype(np.float32)


def main():
    c = comm.init()
    W, r = c.world_size, c.rank
    cfgs = [TableConfig(f"t{i}", D, initializer=Initializer("normal", 1.0, seed=i), rule=optim.SGDRule(), lr=LR)
            for i in range(4)]
    plan = Plan((RankBudget(1 << 30),) * W, tuple(placement(cf, k, W, i) for i, (cf, k) in enumerate(zip(cfgs, KINDS))),
                64, "int8")
    sharded = ShardedEmbeddingCollection(cfgs, c, plan, CommCodecs("int8", "int8"))
    exact = EmbeddingCollection(cfgs)
    keys, gy = inputs(r)
    y = sharded(keys)
    want = exact(keys).data
    bound = np.abs(want).max(axis=-1, keepdims=True) / 254
    err = np.abs(y.data - want)
    assert (err <= bound * 1.0001 + 1e-9).all(), f"rank {r}: forward error {err.max()} over the bound"
    assert (err[:, 3] == 0).all(), "the data-parallel table is read locally, exactly"
    assert err.max() > 0, "int8 should have rounded something"
    y.backward(gy)
    check_updates(sharded, exact, W)
    check_bytes(sharded, plan, W, r)
    print(f"rank {r}: ok", flush=True)


def check_updates(sharded, exact, W):
    """Each held row moved by ``-lr·gy/W`` of its one key, within int8's bound on the gradient row that travelled."""
    everything = [inputs(q) for q in range(W)]
    grad_of = {int(k): g for keys, gy in everything for k, g in zip(keys.reshape(-1), (gy / W).reshape(-1, D))}
    for t, (name, shard) in enumerate(sharded.shards.items()):
        got_keys, got_rows, _ = (np.concatenate(x) for x in zip(*shard.table.export()))
        assert got_keys.size, name
        a, b = shard.cols
        w0 = exact.tables[int(name[1:])].lookup(got_keys).data[:, a:b]
        g = np.stack([grad_of[int(k)] for k in got_keys])[:, a:b]
        bound = LR * np.abs(g).max(axis=1, keepdims=True) / 254 * (shard.kind != "data")
        err = np.abs(got_rows[:, :b - a] - (w0 - LR * g))
        assert (err <= bound * 1.0001 + 1e-6).all(), f"{name} ({shard.kind}): update error {err.max()}"


def check_bytes(sharded, plan, W, rank):
    """What this rank sent to other ranks: its keys (8 B each) and a row of per-stream counts to each; the rows of
    the keys others sent it, and the gradient rows of the keys it sent them (width + 4 B each, int8)."""
    keys_sent = rows_sent = grads_sent = 0
    for q in range(W):
        keys = inputs(q)[0]
        for t, kind in enumerate(KINDS[:3]):
            name, k = f"t{t}", keys[:, t]
            for owner, start, stop in (plan.column_ranges(name) if kind == "column" else [(None, 0, D)]):
                owners = plan.owner_of(name, k) if owner is None else np.full(k.size, owner)
                if q == rank:
                    keys_sent += int((owners != rank).sum())
                    grads_sent += int((owners != rank).sum()) * (stop - start + 4)
                else:
                    rows_sent += int((owners == rank).sum()) * (stop - start + 4)
    streams = len(sharded.streams)
    assert streams == 2 + W
    want = {"a2a_keys": 8 * keys_sent + 8 * streams * (W - 1), "a2a_fwd": rows_sent, "a2a_bwd": grads_sent}
    sent = sharded.comm_bytes()
    assert {k: sent[k] for k in want} == want, (sent, want)
    assert sent["dp_allgather"] > 0 and sent["column_sums"] == 0, sent  # SGD columns need no sums
    assert sharded.comm_bytes() == dict.fromkeys(sent, 0), "comm_bytes() starts the count over"


main()
