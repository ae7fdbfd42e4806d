"""The bookkeeping of the all-to-all, without a communicator: streams and groups from a plan, the requester's
Route and the owner's Arrivals, against loops over the keys; and a world of one (LocalCommunicator) training like
an EmbeddingCollection."""
import numpy as np
import pytest

from gpuemb import comm, optim
from gpuemb.autograd import no_grad
from gpuemb.distributed import Arrivals, Route, ShardedEmbeddingCollection, streams_of
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import TableConfig

W, D = 3, 6
CONFIGS = [TableConfig(n, D, rule=optim.RowwiseAdagradRule(), lr=0.1) for n in ("a", "b", "c", "d")]


def three_rank_plan():
    """a: table-wise on rank 2; b: row-wise; c: column-wise in widths 2, 1, 3 on ranks 1, 0, 2; d: data."""
    specs = [TableSpec.from_config(c, 100) for c in CONFIGS]
    return Plan((RankBudget(1 << 30),) * W, (
        Placement(specs[0], "table", (Shard(2, 100, (0, D)),)),
        Placement(specs[1], "row", tuple(Shard(r, 100, (0, D), residue=r) for r in range(W))),
        Placement(specs[2], "column", (Shard(1, 100, (0, 2)), Shard(0, 100, (2, 3)), Shard(2, 100, (3, 6)))),
        Placement(specs[3], "data", tuple(Shard(r, 100, (0, D)) for r in range(W)))), 64, "fp32")


def test_streams_are_grouped_by_width_widest_first():
    streams, groups = streams_of(three_rank_plan(), [c.name for c in CONFIGS])
    assert [(s.table, s.kind, s.cols, s.rank) for s in streams] == [
        (0, "table", (0, 6), 2), (1, "row", (0, 6), -1), (2, "column", (3, 6), 2), (2, "column", (0, 2), 1),
        (2, "column", (2, 3), 0)]
    assert groups == [(6, [0, 1]), (3, [2]), (2, [3]), (1, [4])]
    assert [s.held_by(0) for s in streams] == [False, True, False, False, True]


def test_route_and_arrivals_match_a_loop_over_every_key(rng):
    plan = three_rank_plan()
    streams, groups = streams_of(plan, [c.name for c in CONFIGS])
    table_of = np.array([0, 1, 2, 1, 3])  # feature -> table: b serves two features
    B, F = 7, 5
    batches = [rng.integers(0, 50, (B, F)) for _ in range(W)]
    owner = lambda t, k: plan.owner_of(CONFIGS[t].name, k)  # noqa: E731
    routes = [Route(k, table_of, streams, groups, W) for k in batches]
    # the requester: every (position, stream) once, sorted by destination then stream, batch order within
    for keys, route in zip(batches, routes):
        want = sorted(((owner(st.table, keys[b, f:f + 1])[0] if st.kind == "row" else st.rank, s, b * F + f)
                       for s, st in enumerate(streams) for b in range(B) for f in range(F) if table_of[f] == st.table))
        assert list(zip(route.dest, route.stream, route.pos)) == want
        np.testing.assert_array_equal(route.keys, keys.reshape(-1)[route.pos])
        np.testing.assert_array_equal(route.send_counts, np.bincount(route.dest, minlength=W))
    # the owner: rank r receives peer by peer what each sent it; its streams' keys and reply places follow
    for r in range(W):
        counts = np.stack([route.stream_counts[r] for route in routes])
        received = [(q, route.stream[i], route.keys[i], i) for q, route in enumerate(routes)
                    for i in np.flatnonzero(route.dest == r)]
        a = Arrivals(counts, groups)
        for s in range(len(streams)):
            want = [n for n, (_, st, _, _) in enumerate(received) if st == s]
            np.testing.assert_array_equal(a.index[s], want)
        for g, (_, ids) in enumerate(groups):
            in_group = [n for n, (_, st, _, _) in enumerate(received) if st in ids]
            assert a.group_sizes[g] == len(in_group)
            for s in ids:
                np.testing.assert_array_equal(a.reply_pos[s], [in_group.index(n) for n in a.index[s]])
            # what r replies to peer q in group g is what q expects back from r, in q's send order
            for q, route in enumerate(routes):
                mine = route.group_index[g][route.dest[route.group_index[g]] == r]
                assert a.group_counts[g][q] == route.group_counts[g][r] == mine.size


def test_a_deduplicated_route_sends_each_key_once_an_owner_and_stream_and_expands_back(rng):
    plan = three_rank_plan()
    streams, groups = streams_of(plan, [c.name for c in CONFIGS])
    table_of = np.array([0, 1, 2, 1, 3])
    S, group_of = len(streams), np.array([g for g, (_, ids) in enumerate(groups) for _ in ids])
    for keys in (rng.integers(0, 6, (20, 5)), rng.integers(0, 1000, (20, 5)), np.zeros((0, 5), np.int64)):
        plain, d = Route(keys, table_of, streams, groups, W), Route(keys, table_of, streams, groups, W, dedup=True)
        assert plain.expand is None and plain.sums is None
        for a in ("pos", "stream", "dest"):  # every entry is still listed, in the same order
            np.testing.assert_array_equal(getattr(d, a), getattr(plain, a))
        sent_stream = np.repeat(np.tile(np.arange(S), W), d.stream_counts.reshape(-1))
        sent_dest = np.repeat(np.arange(W), d.send_counts)
        np.testing.assert_array_equal(d.send_counts, d.stream_counts.sum(axis=1))
        for w in range(W):
            for s in range(S):  # each (owner, stream): its distinct keys, in the order they first occur
                seg = plain.keys[(plain.dest == w) & (plain.stream == s)]
                _, first = np.unique(seg, return_index=True)
                np.testing.assert_array_equal(d.keys[(sent_dest == w) & (sent_stream == s)], seg[np.sort(first)])
        for g in range(len(groups)):
            mine = group_of[sent_stream] == g
            np.testing.assert_array_equal(d.group_counts[g], np.bincount(sent_dest[mine], minlength=W))
            # the rows that come back for the group, one a sent key, copied to every entry, give its keys
            np.testing.assert_array_equal(d.keys[mine][d.expand[g]], plain.keys[plain.group_index[g]])
            order, offsets = d.sums[g]
            assert offsets[-1] == order.size == d.expand[g].size and offsets.size == mine.sum() + 1
            for u in range(mine.sum()):  # the entries a row's gradient adds up, in send order: one at least
                np.testing.assert_array_equal(order[offsets[u]:offsets[u + 1]], np.flatnonzero(d.expand[g] == u))
                assert offsets[u + 1] > offsets[u]
        assert d.stream_counts.max(initial=0) <= np.unique(keys).size  # hence 6 at most from keys of 0 to 5
    assert d.keys.size == 0 and all(c.sum() == 0 for c in d.group_counts)


def one_rank_plan(kinds):
    specs = [TableSpec.from_config(c, 100) for c in CONFIGS]
    return Plan((RankBudget(1 << 30),), tuple(
        Placement(s, k, (Shard(0, 100, (0, D), residue=0 if k == "row" else None),)) for s, k in zip(specs, kinds)),
        64, "fp32")


@pytest.mark.parametrize("shared", [False, True])
def test_a_world_of_one_trains_like_an_embedding_collection(shared, rng):
    configs, n = (CONFIGS[1:2], 3) if shared else (CONFIGS, None)
    sharded = ShardedEmbeddingCollection(configs, comm.LocalCommunicator(), one_rank_plan(["table", "row", "column",
                                                                                           "data"]), n_features=n)
    plain = EmbeddingCollection(configs, n)
    F = 3 if shared else 4
    for _ in range(3):
        keys, gy = rng.integers(0, 30, (8, F)), rng.standard_normal((8, F, D)).astype(np.float32)
        want, got = plain(keys), sharded(keys)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-6)
        want.backward(gy)
        got.backward(gy)
    for t, shard in zip(plain.tables, sharded.shards.values()):  # in key order: a store exports in its own
        k, rows, _ = sorted_export(shard.table)
        k2, rows2, _ = sorted_export(t)
        np.testing.assert_array_equal(k, k2)
        np.testing.assert_allclose(rows, rows2, rtol=1e-6)


def sorted_export(table):
    keys, rows, steps = (np.concatenate(x) for x in zip(*table.export()))
    order = np.argsort(keys)
    return keys[order], rows[order], steps[order]


def test_eval_reads_without_inserting(rng):
    sharded = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), one_rank_plan(["table"] * 3 + ["data"]))
    keys = rng.integers(0, 30, (5, 4))
    with no_grad():
        train_rows = sharded(keys).data
    held = [len(t) for t in sharded.tables]
    sharded.eval()
    unseen = keys + 1000
    got = sharded(unseen)
    assert [len(t) for t in sharded.tables] == held and not got.requires_grad
    np.testing.assert_array_equal(sharded(keys).data, train_rows)
    np.testing.assert_allclose(got.data, EmbeddingCollection(CONFIGS).eval()(unseen).data)


def test_a_plan_that_does_not_fit_is_refused():
    local = comm.LocalCommunicator()
    with pytest.raises(ValueError, match="plan is for 3 ranks but the communicator has 1"):
        ShardedEmbeddingCollection(CONFIGS, local, three_rank_plan())
    other = [TableConfig(c.name, 4) for c in CONFIGS]
    with pytest.raises(ValueError, match="'a' has dim 4 but the plan has dim 6"):
        ShardedEmbeddingCollection(other, local, one_rank_plan(["table"] * 4))
    with pytest.raises(ValueError, match="sparse has shape"):
        ShardedEmbeddingCollection(CONFIGS, local, one_rank_plan(["table"] * 4))(np.zeros((2, 3), np.int64))
