"""Run under ``mpiexec -n W`` by test_mpi.py, and by test_nccl_emulated.py with ``nccl`` as second argument: every
collective of that backend (mpi by default) against a NumPy reference.

Each rank's data comes from a generator seeded by (seed, rank), so every rank rebuilds all ranks' inputs and
computes the expected result itself. A failed check raises, which aborts the job; success prints "rank R: ok".
"""
import sys

import numpy as np

from gpuemb import comm
from gpuemb.kernels.codecs import CODECS
from gpuemb.sharding.cost import vector_bytes

SEED, D = int(sys.argv[1]), 6
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "mpi"


def rows_of(rank, W):
    """Rank ``rank``'s rows for the all-to-all, magnitudes over four decades, and its per-peer counts: 1 to 3 rows
    each, except none from rank 0 to itself and, with 3 ranks or more, none to the next rank."""
    rng = np.random.default_rng([SEED, rank])
    counts = rng.integers(1, 4, W)
    if W > 2:
        counts[(rank + 1) % W] = 0
    counts[0] *= rank != 0
    n = int(counts.sum())
    rows = rng.standard_normal((n, D)) * 10.0 ** rng.uniform(-2, 2, (n, 1))
    return rows.astype(np.float32), counts


def expected_alltoallv(rank, W):
    parts, recv_counts = [], []
    for src in range(W):
        rows, counts = rows_of(src, W)
        start = counts[:rank].sum()
        parts.append(rows[start:start + counts[rank]])
        recv_counts.append(counts[rank])
    return np.concatenate(parts), np.array(recv_counts)


def check_alltoallv(c):
    rows, counts = rows_of(c.rank, c.world_size)
    want, want_counts = expected_alltoallv(c.rank, c.world_size)
    got, got_counts = c.alltoallv(rows, counts)
    np.testing.assert_array_equal(got_counts, want_counts)
    np.testing.assert_array_equal(got, want)
    assert c.reset_bytes() == {"alltoallv": (counts.sum() - counts[c.rank]) * D * 4}
    keys = np.random.default_rng([SEED, c.rank, 1]).integers(-2 ** 62, 2 ** 62, int(counts.sum()))
    got_keys, _ = c.alltoallv(keys, counts, tag="keys")  # 1-D int64, as the key exchange sends them
    want_keys = [np.random.default_rng([SEED, s, 1]).integers(-2 ** 62, 2 ** 62, int(rows_of(s, c.world_size)[1]
                 .sum())) for s in range(c.world_size)]
    starts = [rows_of(s, c.world_size)[1][:c.rank].sum() for s in range(c.world_size)]
    np.testing.assert_array_equal(got_keys, np.concatenate(
        [k[a:a + n] for k, a, n in zip(want_keys, starts, want_counts)]))


def check_encoded(c):
    want, _ = expected_alltoallv(c.rank, c.world_size)
    rows, counts = rows_of(c.rank, c.world_size)
    sent_rows = counts.sum() - counts[c.rank]
    for codec in CODECS:
        got, _ = comm.alltoallv_encoded(c, rows, counts, codec, tag=codec)
        if codec == "int8":  # half a step of the row's own scale
            bound = np.abs(want).max(axis=1, keepdims=True) / 254 * (1 + 1e-5)
        else:  # relative rounding of the float format, and half a step of float16's subnormals
            bound = {"fp32": 0.0, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}[codec] * np.abs(want)
            bound = np.maximum(bound, 2.0 ** -25) if codec == "fp16" else bound
        assert np.all(np.abs(got - want) <= bound), codec
        assert c.bytes_sent[codec] == sent_rows * vector_bytes(D, codec), (codec, c.bytes_sent[codec])
    codecs = comm.CommCodecs(forward="int8", backward="fp16")
    codecs.alltoallv_forward(c, rows, counts)
    codecs.alltoallv_backward(c, rows, counts)
    assert c.bytes_sent["a2a_fwd"] == sent_rows * (D + 4) and c.bytes_sent["a2a_bwd"] == sent_rows * D * 2


def check_reductions(c):
    W = c.world_size
    xs = [np.random.default_rng([SEED, r, 2]).standard_normal((3, 4)) for r in range(W)]
    np.testing.assert_allclose(c.allreduce(xs[c.rank]), np.sum(xs, axis=0), rtol=1e-12)
    ints = [np.random.default_rng([SEED, r, 3]).integers(-1000, 1000, 7) for r in range(W)]
    np.testing.assert_array_equal(c.allreduce(ints[c.rank]), np.sum(ints, axis=0))
    f32 = [x.astype(np.float32) for x in xs]
    np.testing.assert_array_equal(c.allreduce(f32[c.rank], op="max"), np.max(f32, axis=0))
    np.testing.assert_array_equal(c.allreduce(f32[c.rank], op="min"), np.min(f32, axis=0))
    sizes = [xs[0].nbytes, ints[0].nbytes, f32[0].nbytes, f32[0].nbytes]
    assert c.bytes_sent["allreduce"] == sum(2 * (W - 1) * n // W for n in sizes)


def check_reduce_scatter(c):
    W = c.world_size
    xs = [np.random.default_rng([SEED, r, 6]).standard_normal((2 * W, 3)).astype(np.float32) for r in range(W)]
    mine = slice(2 * c.rank, 2 * c.rank + 2)
    np.testing.assert_allclose(c.reduce_scatter(xs[c.rank], tag="rs"), np.sum(xs, axis=0)[mine], rtol=1e-6)
    assert c.bytes_sent["rs"] == (W - 1) * xs[0].nbytes // W
    np.testing.assert_array_equal(c.reduce_scatter(xs[c.rank], op="max"), np.max(xs, axis=0)[mine])
    ints = [np.random.default_rng([SEED, r, 7]).integers(-1000, 1000, (W, 2, 2)) for r in range(W)]
    np.testing.assert_array_equal(c.reduce_scatter(ints[c.rank], op="min"), np.min(ints, axis=0)[c.rank:c.rank + 1])
    empty = c.reduce_scatter(np.zeros((0, 4), np.float32))
    assert empty.shape == (0, 4)
    try:  # the same shape on every rank, so every rank refuses it
        c.reduce_scatter(np.ones((W + 1, 2), np.float32))
    except comm.CommError as e:
        assert f"{W + 1} rows do not split into {W} equal blocks" in str(e), str(e)
    else:
        raise AssertionError("a reduce_scatter of rows that do not split passed")


def check_gather_and_broadcast(c):
    W = c.world_size
    parts = [np.random.default_rng([SEED, r, 4]).standard_normal((r % 3, 2, 2)).astype(np.float32)
             for r in range(W)]  # rank 0 gathers no rows
    np.testing.assert_array_equal(c.allgather(parts[c.rank]), np.concatenate(parts))
    root = W - 1
    mine = np.random.default_rng([SEED, c.rank, 5]).standard_normal((4, 3))
    want = np.random.default_rng([SEED, root, 5]).standard_normal((4, 3))
    np.testing.assert_array_equal(c.broadcast(mine, root=root), want)
    assert c.bytes_sent["broadcast"] == (W - 1) * want.nbytes * (c.rank == root)
    c.barrier()


def check_disagreement_is_an_error_on_every_rank(c):
    try:
        c.allreduce(np.ones(c.rank + 1))
    except comm.CommError as e:
        assert "rank 0 called allreduce(float64 [1])" in str(e) and "rank 1 called allreduce(float64 [2])" in str(e)
    else:
        raise AssertionError("allreduce of different shapes passed")
    try:
        c.barrier() if c.rank == 0 else c.allgather(np.ones((2, 3), np.float32))
    except comm.CommError as e:
        assert "rank 0 called barrier" in str(e) and "called allgather(float32 [2, 3])" in str(e), str(e)
    else:
        raise AssertionError("a barrier against an allgather passed")
    c.barrier()  # and the world still works


if __name__ == "__main__":
    c = comm.init(BACKEND)
    assert isinstance(c, comm.Communicator) and c.name == BACKEND and c.world_size > 1
    check_alltoallv(c)
    check_encoded(c)
    check_reductions(c)
    check_reduce_scatter(c)
    check_gather_and_broadcast(c)
    check_disagreement_is_an_error_on_every_rank(c)
    print(f"rank {c.rank}: ok", flush=True)
