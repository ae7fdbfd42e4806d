"""Sharded collections of pooled bags: the bags' routing against loops over every bag, the combination of row-wise
partial results, the inputs a collection takes, a world of one against ``EmbeddingCollection``, a batch's rows of
jagged features for a rank's part, and (``mpiexec``, 2 and 4 ranks) every placement and pooling against one
process on the global batch (workers/jagged.py)."""
from types import SimpleNamespace

import numpy as np
import pytest

from gpuemb import comm, models, optim
from gpuemb.distributed import ArrivedBags, Arrivals, BagRoute, ShardedEmbeddingCollection, local_bags, streams_of
from gpuemb.distributed import pooled_exchange
from gpuemb.distributed.bag_routing import interleave, pack, pack_weights
from gpuemb.distributed.row_partials import RowPartials
from gpuemb.io.batch import Batch
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.kernels.embedding_bag import embedding_bag_max_ref, embedding_bag_ref
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.store.collection import EmbeddingCollection, feature_keys
from gpuemb.store.options import Initializer, TableConfig
from gpuemb.train import ConfigError, TrainConfig
from gpuemb.train.cluster import Cluster
from gpuemb.train.slices import Slices

D = 6
KINDS = ("table", "row", "column", "data")
CONFIGS = [TableConfig(n, D, initializer=Initializer("uniform", seed=i + 1), rule=rule, lr=0.1)
           for i, (n, rule) in enumerate(zip("abcd", (optim.RowwiseAdagradRule(), optim.SGDRule(),
                                                      optim.AdagradRule(), optim.AdamRule())))]


def bags_plan(W):
    """a: table-wise on the last rank; b: row-wise; c: by columns (0, 2) and (2, 6) on the last two (one rank:
    one shard of all columns); d: data."""
    specs = [TableSpec.from_config(c, 100) for c in CONFIGS]
    last = W - 1
    columns = (Shard(last, 100, (0, 2)), Shard(last - 1, 100, (2, D))) if W > 1 else (Shard(0, 100, (0, D)),)
    return Plan((RankBudget(1 << 30),) * W, (
        Placement(specs[0], "table", (Shard(last, 100, (0, D)),)),
        Placement(specs[1], "row", tuple(Shard(r, 100, (0, D), residue=r) for r in range(W))),
        Placement(specs[2], "column", columns),
        Placement(specs[3], "data", tuple(Shard(r, 100, (0, D)) for r in range(W)))), 64, "fp32")


def random_jagged(rng, F, B, weighted=False, offset=0):
    lengths = rng.integers(0, 5, (F, B))
    values = rng.zipf(1.3, int(lengths.sum())) % 30 + offset
    weights = rng.uniform(0, 2, values.size) if weighted else None
    return JaggedFeatures.from_lengths([f"f{i}" for i in range(F)], values, lengths, weights)


def test_bag_route_and_arrived_bags_match_a_loop_over_every_bag(rng):
    W, B = 3, 4
    plan = bags_plan(W)
    streams, groups = streams_of(plan, [c.name for c in CONFIGS])
    table_of = np.array([0, 1, 2, 1, 3])  # b serves two features
    owner = lambda t, k: plan.owner_of(CONFIGS[t].name, k)  # noqa: E731
    # rank 1 has no weights: its keys weigh 1 where the others send theirs
    batches = [local_bags(random_jagged(rng, 5, B, weighted=r != 1), 5, False, None, "sum") for r in range(W)]
    routes = [BagRoute(bags, table_of, streams, groups, W) for bags in batches]
    sent = []  # per requester: (dest, stream, pos, keys, weights) of every entry, in the order it must be sent
    for bags, route in zip(batches, routes):
        starts = np.cumsum(bags.lengths.ravel()) - bags.lengths.ravel()
        entries = []
        for s, st in enumerate(streams):
            for p in range(W) if st.kind == "row" else [st.rank]:
                for b in range(B):
                    for f in np.flatnonzero(table_of == st.table):
                        at = starts[f * B + b] + np.arange(bags.lengths[f, b])
                        if st.kind == "row":  # only the owners of a key of the bag get a sub-bag
                            at = at[owner(st.table, bags.values[at]) == p]
                            if not at.size:
                                continue
                        w = np.ones(at.size, np.float32) if bags.weights is None else bags.weights[at]
                        entries.append((p, s, b * 5 + f, bags.values[at], w))
        entries.sort(key=lambda e: (e[0], e[1]))
        sent.append(entries)
        assert list(zip(route.dest, route.stream, route.pos)) == [e[:3] for e in entries]
        np.testing.assert_array_equal(route.lengths, [e[3].size for e in entries])
        np.testing.assert_array_equal(route.keys, np.concatenate([e[3] for e in entries]))
        if bags.weights is not None:
            np.testing.assert_array_equal(route.weights, np.concatenate([e[4] for e in entries]).astype(np.float32))
        np.testing.assert_array_equal(route.key_counts, [sum(e[3].size for e in entries if e[0] == p)
                                                         for p in range(W)])
    # rank r receives, peer by peer, the block each packed for it, weights (two to a word) after the keys where the
    # peer has them; each stream's bags come out in peer order
    blocks = []
    for q in routes:
        send, counts = pack(q.lengths, q.keys, q.send_counts, q.key_counts), q.send_counts + q.key_counts
        if q.weights is not None:
            words, sizes = pack_weights(q.weights, q.key_counts)
            assert list(sizes) == list((q.key_counts + 1) // 2)
            send, counts = interleave(send, counts, words, sizes), counts + sizes
        blocks.append(np.split(send, np.cumsum(counts)))
    for r in range(W):
        arrived = ArrivedBags(np.concatenate([b[r] for b in blocks]), [b[r].size for b in blocks],
                              [q.send_counts[r] for q in routes], np.array([q.weights is not None for q in routes]))
        a = Arrivals(np.stack([q.stream_counts[r] for q in routes]), groups)
        for s in range(len(streams)):
            want = [e for entries in sent for e in entries if e[0] == r and e[1] == s]
            keys, offsets, w = arrived.bags(a.index[s])
            np.testing.assert_array_equal(np.diff(offsets), [e[3].size for e in want])
            np.testing.assert_array_equal(keys, np.concatenate([e[3] for e in want] + [np.zeros(0, np.int64)]))
            np.testing.assert_array_equal(w, np.concatenate([e[4] for e in want] + [np.zeros(0)]).astype(np.float32))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_row_wise_partials_combine_into_the_whole_bags_pooled(mode, rng):
    """Owners send a partial row only for the sub-bags they hold keys of; the requester's combination is the whole
    bag pooled, and each partial's gradient is the one-process backward's share of it."""
    W, n = 4, 50
    table = rng.standard_normal((40, 5)).astype(np.float32)
    lengths = rng.integers(0, 7, n)
    lengths[:3] = 0  # empty bags send nothing and pool to zeros
    slots = rng.integers(0, 40, int(lengths.sum()))
    owner = rng.integers(0, W, 40)[slots]  # a row's rank: a key repeated in a bag goes to one owner
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    bag = np.repeat(np.arange(n), lengths)
    parts, pos, sub, whose = [], [], [], []  # owner after owner, each owner's sub-bags in bag order
    for p in range(W):
        mine = owner == p
        counts = np.bincount(bag[mine], minlength=n)
        held = np.flatnonzero(counts)
        part_offsets = np.concatenate([[0], np.cumsum(counts)])
        parts.append(embedding_bag_ref(table, slots[mine], part_offsets, "sum" if mode == "mean" else mode)[held])
        pos.append(held), sub.append(counts[held]), whose.append(np.full(held.size, p))
    pos, whose = np.concatenate(pos), np.concatenate(whose)
    partials = RowPartials(pos * 3 + 1, np.concatenate(sub))  # places b·F + f of one feature of three
    got = partials.combine(np.concatenate(parts), mode)
    full = lengths > 0
    np.testing.assert_array_equal(partials.bags, np.flatnonzero(full) * 3 + 1)
    np.testing.assert_allclose(got, embedding_bag_ref(table, slots, offsets, mode)[full], rtol=1e-6, atol=1e-6)
    gy = rng.standard_normal((n, 5)).astype(np.float32)
    grads = partials.grads(gy[full], mode)
    if mode != "max":
        np.testing.assert_allclose(grads, gy[pos] / (lengths[pos, None] if mode == "mean" else 1), rtol=1e-6)
        return
    _, argmax = embedding_bag_max_ref(table, slots, offsets)  # the winner holds the key at one process's argmax
    winner = np.where(argmax >= 0, owner[np.maximum(argmax, 0)], -1)
    np.testing.assert_array_equal(grads, np.where(winner[pos] == whose[:, None], gy[pos], 0))


def test_every_input_of_pooled_features_is_one_feature_major_csr(rng):
    hotness, B = (2, 1, 3), 4
    matrix = rng.integers(0, 100, (B, sum(hotness)))
    cols = np.split(np.arange(sum(hotness)), np.cumsum(hotness)[:-1])
    values = np.concatenate([matrix[:, c].ravel() for c in cols])
    lengths = np.repeat(np.array(hotness)[:, None], B, axis=1)
    jagged = JaggedFeatures.from_lengths(["x", "y", "z"], values, lengths)
    listed = [jagged.feature(f)[:2] for f in range(3)]
    for shared in (False, True):
        want = feature_keys(values, np.repeat(np.arange(3), lengths.sum(axis=1))) if shared else values
        for sparse in (matrix, jagged, listed):
            got = local_bags(sparse, 3, shared, hotness, "max")
            np.testing.assert_array_equal(got.values, want)
            np.testing.assert_array_equal(got.lengths, lengths)
            assert got.weights is None
    # one weighted feature: the others weigh each key 1, as in one process
    weighted = [listed[0], (*listed[1], np.full(B, 0.5)), listed[2]]
    np.testing.assert_array_equal(local_bags(weighted, 3, False, None, "sum").weights,
                                  np.where(np.repeat(np.arange(3), lengths.sum(axis=1)) == 1, 0.5, 1))


@pytest.mark.parametrize("sparse, n_features, mode, message", [
    ("weighted", 3, "max", "per-key weights make a weighted sum, but the collection pools by mode='max'"),
    ("jagged", 2, "sum", "jagged features of 3 features for a collection of 2"),
    ("listed", 2, "sum", "3 \\(keys, offsets\\) bags for 2 features"),
    ("matrix", 3, "sum", "a matrix of keys pools only under fixed hotness"),
])
def test_pooled_inputs_that_do_not_fit_are_refused_in_one_line(sparse, n_features, mode, message, rng):
    jagged = random_jagged(rng, 3, 4, weighted=sparse == "weighted")
    given = {"weighted": jagged, "jagged": jagged, "listed": [jagged.feature(f)[:2] for f in range(3)],
             "matrix": rng.integers(0, 9, (4, 5))}[sparse]
    with pytest.raises(ValueError, match=f"^ShardedEmbeddingCollection: {message}[^\n]*$"):
        local_bags(given, n_features, False, None, mode)


@pytest.mark.parametrize("mode, weighted", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_a_world_of_one_pools_and_trains_like_an_embedding_collection(mode, weighted, rng):
    ref = EmbeddingCollection(CONFIGS, mode=mode)
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), mode=mode)
    for _ in range(3):
        batch = random_jagged(rng, 4, 6, weighted)
        want, got = ref(batch), one(batch)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-6, atol=1e-7)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy)
    for table, shard in zip(ref.tables, (one.shards[c.name] for c in CONFIGS)):
        want, got = (tuple(map(np.concatenate, zip(*t.export()))) for t in (table, shard.table))
        order, got_order = np.argsort(want[0]), np.argsort(got[0])
        np.testing.assert_array_equal(got[0][got_order], want[0][order])
        np.testing.assert_allclose(got[1][got_order], want[1][order], rtol=1e-5, atol=1e-6, err_msg=shard.kind)
        np.testing.assert_array_equal(got[2][got_order], want[2][order])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_a_world_of_one_pools_row_wise_bags_through_a_compressed_codec(mode, rng):
    """int8 partials carry their own scales: each is decoded, then combined, within half a step of its scale."""
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), comm.CommCodecs("int8"),
                                     mode=mode)
    batch = random_jagged(rng, 4, 6)
    want = EmbeddingCollection(CONFIGS, mode=mode)(batch).data
    np.testing.assert_allclose(one(batch).data, want, rtol=0, atol=np.abs(want).max() / 254 * 1.001)


def test_single_hot_features_keep_the_plain_exchange(rng, monkeypatch):
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), mode="max")
    keys = rng.integers(0, 50, (5, 4))
    want = one(keys).data
    monkeypatch.setattr(pooled_exchange.ShardedPooledLookup, "apply", lambda *a: pytest.fail("pooled a single key"))
    np.testing.assert_array_equal(one(JaggedFeatures.from_dense(list("abcd"), keys)).data, want)


def test_fixed_hotness_pools_a_matrix_of_keys_as_one_process_does(rng):
    hotness = (2, 1, 3, 1)
    ref = EmbeddingCollection(CONFIGS, mode="mean", hotness=hotness)
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), mode="mean", hotness=hotness)
    sparse = rng.integers(0, 30, (6, sum(hotness)))
    np.testing.assert_allclose(one(sparse).data, ref(sparse).data, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="hotness=\\(2, 1\\); give one int >= 1 per feature \\(4 features\\)"):
        ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), hotness=(2, 1))


def test_same_bits_on_any_world_size_refuse_partial_sums_of_bags(rng):
    """A row-wise owner's partial sum rounds by which keys it holds: --deterministic refuses it, max it keeps."""
    def sharded(mode, hotness=None):
        return ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), mode=mode, hotness=hotness)
    jagged = random_jagged(rng, 4, 3)
    for mode in ("sum", "mean", "max"):
        c = sharded(mode)
        c.same_bits = True
        if mode == "max":
            assert c.partial_sums() == [] and c(jagged).shape == (3, 4, D)
            continue
        assert c.partial_sums() == ["b"]
        c(JaggedFeatures.from_dense(list("abcd"), rng.integers(0, 9, (3, 4))))  # single keys: nothing to pool
        with pytest.raises(ValueError, match="^ShardedEmbeddingCollection: table 'b' is row-wise and pools bags by "
                                             f"{mode}, whose partial sums round by the world size; [^\n]*$"):
            c(jagged)
    deterministic = Cluster(SimpleNamespace(rank=0, world_size=1, name="fake"), TrainConfig.from_dict(
        {"deterministic": 4}))
    with pytest.raises(ConfigError, match="--deterministic: table b is split by rows and pools its multi-hot "
                                          "features by sum, .* use --sharding table or column"):
        deterministic._deterministic(None, [sharded("sum", (2, 1, 1, 1))], 8)


def test_jagged_features_take_rows_feature_major(rng):
    jagged = random_jagged(rng, 3, 7, weighted=True)
    for rows in (np.array([6, 0, 0, 3]), slice(2, 5), np.arange(7) % 2 == 0, np.zeros(0, np.int64), [-1]):
        got = jagged[rows]
        picked = np.arange(7)[rows]
        assert got.batch_size == picked.size and got.names == jagged.names
        for f in range(3):
            keys, offsets, weights = jagged.feature(f)
            bags = [(keys[offsets[b]:offsets[b + 1]], weights[offsets[b]:offsets[b + 1]]) for b in picked]
            got_keys, got_offsets, got_weights = got.feature(f)
            np.testing.assert_array_equal(np.diff(got_offsets), [k.size for k, _ in bags])
            np.testing.assert_array_equal(got_keys, np.concatenate([k for k, _ in bags] + [keys[:0]]))
            np.testing.assert_array_equal(got_weights, np.concatenate([w for _, w in bags] + [weights[:0]]))
    with pytest.raises(IndexError):
        jagged.take([7])


def test_micro_slices_take_their_rows_of_jagged_features(rng):
    """``--deterministic``'s evaluation: a short batch padded by repeating its last row (the loader's ``pad_to``),
    run slice by slice, and the padding cut off."""
    model = models.build("dlrm", 3, CONFIGS, seed=0, bottom=(D,), top=(8,), pooling="mean")
    batch = Batch(rng.random(7).astype(np.float32), rng.random((7, 3)).astype(np.float32), random_jagged(rng, 4, 7))
    padded = batch.take(np.minimum(np.arange(8), 6))
    logits, labels = Slices(2, 8, comm.LocalCommunicator(), None).eval_start(model, padded, 7)()
    np.testing.assert_allclose(logits, model(batch.dense, batch.sparse).data, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(labels, batch.label)
    with pytest.raises(ValueError, match="a part of 7 rows of an eval batch of 7"):
        Slices(2, 8, comm.LocalCommunicator(), None).eval_start(model, batch, 7)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_bags_train_like_one_process_on_the_global_batch(ranks, rng, mpiexec):
    mpiexec(ranks, "jagged.py", rng.integers(1 << 30))


def test_bags_routed_ahead_pool_as_routed_now_and_a_forward_of_other_bags_is_refused(rng):
    """On an overlapped communicator the next batch's bags go to their owners before its forward (route_ahead,
    keys_ahead.py), their per-key weights with them: the forward then exchanges no key, and pools what the exchange
    in the forward gives."""
    ref = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), bags_plan(1), mode="sum")
    over = comm.OverlappedCommunicator(comm.LocalCommunicator())
    ahead = ShardedEmbeddingCollection(CONFIGS, over, bags_plan(1), mode="sum")
    tags, start = [], over.start
    over.start = lambda op, *args: tags.append(args[2] if op == "alltoallv" else op) or start(op, *args)
    for _ in range(2):
        batch = random_jagged(rng, 4, 6, weighted=True)
        tags.clear()  # the last backward's
        ahead.route_ahead(batch)
        assert tags == ["a2a_keys", "a2a_keys"]  # the counts, then the sub-bags' lengths, keys and weights
        tags.clear()
        got = ahead(batch)
        assert "a2a_keys" not in tags and tags, tags  # the forward exchanges only rows

        tags.clear()
        np.testing.assert_array_equal(got.data, ref(batch).data)
        gy = rng.standard_normal(got.shape).astype(np.float32)
        for c, y in ((ahead, got), (ref, ref(batch))):
            y.backward(gy)
            c.settle()
    ahead.route_ahead(random_jagged(rng, 4, 6))
    with pytest.raises(RuntimeError, match="this training batch is not the one whose bags route_ahead sent"):
        ahead(random_jagged(rng, 4, 6))
    over.drain()
