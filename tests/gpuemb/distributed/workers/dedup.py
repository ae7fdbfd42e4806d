"""Run by test_dedup.py under ``mpiexec -n W``: single keys sent once a rank, owner and stream (``dedup``), on skewed
batches, against one process on the whole batch, and the bytes of each tag against a loop over the keys.

argv: a seed, then ``small`` for the short run of the emulated device. A DLRM of a column-wise table under row-wise
Adagrad (whose shards add up each key's sums), a row-, a table-wise and a data-parallel table trains with and
without ``dedup`` on each rank's 1/W of a global batch whose keys are
Zipf's, each sample's twice (so a rank's part holds each key twice or more). Checks:
- the first step's logits are the same bits with and without it (a row looked up once and copied is the row);
- after every step, the dense parameters and every row of every shard equal one process's within 1e-5;
- what this rank sent its peers each step: ``a2a_keys`` is 8 bytes a distinct (peer, stream, key) and S counts a
  peer, ``a2a_bwd`` a gradient row a distinct key; without ``dedup``, a key and a row an occurrence;
- on the emulated device, after the first step: ``dedup`` costs a step one numba launch (the gradients' sum) and
  one CuPy call (the rows' gather) a group, one copy to the device (every group's indices), and no readback.
Prints "rank R: ok".
"""
import sys

import numpy as np

from common import KEYS, N_DENSE, check_rows, configs, dlrm, plan
from gpuemb import comm, optim
from gpuemb.autograd import Tensor, backend, bce_with_logits, launches, transfers
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.distributed import distribute

SEED, SMALL = int(sys.argv[1]), sys.argv[2:] == ["small"]
G, STEPS, TOL = (12, 2, 1e-5) if SMALL else (24, 4, 1e-5)
KINDS = ["column", "row", "table", "data"]  # the column-wise table's rule is row-wise Adagrad: coupled shards


def batch(step):
    rng = np.random.default_rng([SEED, step])
    sparse = rng.zipf(1.3, (G, 4)) % KEYS
    sparse[1::2] = sparse[::2]  # and every part's keys twice at least: each part starts at an even row
    return rng.standard_normal((G, N_DENSE)).astype(np.float32), sparse, rng.integers(0, 2, G).astype(np.float32)


def train(model, opt, dense, sparse, y, allreduce=None):
    opt.zero_grad()
    logits = model(dense, sparse)
    bce_with_logits(logits, Tensor(to_device(y))).backward()
    if allreduce:
        allreduce()
    opt.step()
    return to_host(logits.data)


def wanted(the_plan, sparse, W, rank, dedup):
    """``{"a2a_keys", "a2a_bwd"}``: the bytes ``rank`` sends its peers for its keys ``sparse [b, 4]``."""
    sent = {}  # (peer, table, columns) -> the keys sent
    for f, (config, kind) in enumerate(zip(configs(), KINDS)):
        keys = sparse[:, f]
        if kind == "table":
            streams = [((0, config.dim), np.full(keys.size, f % W))]
        elif kind == "row":
            streams = [((0, config.dim), the_plan.owner_of(config.name, keys))]
        elif kind == "column":
            streams = [(s.cols, np.full(keys.size, s.rank)) for s in the_plan.placement(config.name).shards]
        else:
            streams = []
        for cols, owners in streams:
            for k, p in zip(keys, owners):
                sent.setdefault((int(p), f, cols), []).append(int(k))
    count = {key: len(set(ks)) if dedup else len(ks) for key, ks in sent.items()}
    S = sum({"table": 1, "row": 1, "data": 0}.get(k, W) for k in KINDS)  # streams: one a column shard
    peers = [p for p in range(W) if p != rank]
    return {"a2a_keys": sum(8 * n for (p, _, _), n in count.items() if p in peers) + 8 * S * len(peers),
            "a2a_bwd": sum(4 * (b - a) * n for (p, _, (a, b)), n in count.items() if p in peers)}


def main():
    c = comm.init()
    W, r = c.world_size, c.rank
    mine = slice(r * G // W, (r + 1) * G // W)
    the_plan = plan(KINDS, W)
    ref, dist, plain = dlrm(), dlrm(), dlrm()
    reduce_dist, reduce_plain = distribute(dist, c, the_plan, dedup=True), distribute(plain, c, the_plan)
    assert dist.embeddings.dedup and not plain.embeddings.dedup
    opts = [optim.Adagrad(m.parameters(), 0.05) for m in (ref, dist, plain)]
    fewer = 0
    dist.embeddings.comm_bytes()  # the two share a communicator: each step's bytes are read right after it
    for step in range(STEPS):
        dense, sparse, y = batch(step)
        train(ref, opts[0], dense, sparse, y)
        logits = []
        counted, crossed = [], []
        for model, opt, reduce, dedup in ((dist, opts[1], reduce_dist, True), (plain, opts[2], reduce_plain, False)):
            before, copies = launches.COUNTS.snapshot(this_thread=True), transfers.COUNTS.snapshot(this_thread=True)
            logits.append(train(model, opt, dense[mine], sparse[mine], y[mine], reduce))
            counted.append(launches.COUNTS.since(before, this_thread=True))
            crossed.append(transfers.COUNTS.since(copies, this_thread=True))
            sent, want = model.embeddings.comm_bytes(), wanted(the_plan, sparse[mine], W, r, dedup)
            assert {tag: sent[tag] for tag in want} == want, (r, step, dedup, sent, want)
        if step == 0:
            assert np.array_equal(*logits), f"rank {r}: dedup changed the first step's logits"
        elif backend.DEVICE == "emulated":  # counted exactly there; the first step also plans dist's matmuls
            more = {f: counted[0][f] - counted[1][f] for f in launches.FIELDS}
            groups = len(dist.embeddings.groups)
            assert more == {"numba": groups, "cupy": groups, "cublaslt": 0, "readbacks": 0}, (r, step, more)
            copies = {f: crossed[0][f] - crossed[1][f] for f in ("to_device", "to_host", "syncs")}
            assert copies == {"to_device": 1, "to_host": 0, "syncs": 0}, (r, step, copies)  # the groups' indices
        fewer += wanted(the_plan, sparse[mine], W, r, True)["a2a_keys"] < wanted(the_plan, sparse[mine], W, r,
                                                                                 False)["a2a_keys"]
        for (name, p), (_, q) in zip(ref.named_parameters(), dist.named_parameters()):
            np.testing.assert_allclose(to_host(q.data), to_host(p.data), rtol=TOL, atol=TOL / 10,
                                       err_msg=f"rank {r}: dense {name}")
        check_rows({t.config.name: t for t in ref.embeddings.tables}, dist.embeddings.shards, the_plan, r, TOL)
    assert W == 1 or fewer == STEPS, f"rank {r}: the skewed batches sent as many keys with dedup as without"
    print(f"rank {r}: ok", flush=True)


main()
