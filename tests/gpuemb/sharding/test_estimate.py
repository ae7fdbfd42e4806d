"""The step-time estimate: hand-computed on two tables of two ranks, skew on a row-wise table, and bad input."""
import pytest

from gpuemb.comm.link import Link
from gpuemb.sharding.estimate import estimate_step
from gpuemb.sharding.hot import HotRows
from gpuemb.sharding.plan import Placement, Plan, Shard
from gpuemb.sharding.profile import DeviceProfile
from gpuemb.sharding.skew import KeySkew
from gpuemb.sharding.spec import RankBudget, TableSpec

LINK = Link("test", 1e-6, 1e9)  # 1 us a message, 1 GB/s
PROFILE = DeviceProfile("test", 1e9, 1e8)  # gathers at 1 GB/s, updates at 0.1 GB/s
FREE_LINK = Link("free", 0.0, 1e300)
GATHER_ONLY = DeviceProfile("gather", 1e9, 1e300)


def two_tables():
    """Tables a and b (1000 rows of dim 4, SGD: 16-byte rows, one unpooled lookup a sample), table-wise on ranks 0
    and 1, a global batch of 8."""
    a, b = (TableSpec(n, 1000, 4, pooling=None, rule="SGDRule") for n in "ab")
    return Plan((RankBudget(10 ** 9),) * 2, (Placement(a, "table", (Shard(0, 1000, (0, 4)),)),
                                            Placement(b, "table", (Shard(1, 1000, (0, 4)),))), 8, "fp32")


def test_two_tables_by_hand():
    est = estimate_step(two_tables(), LINK, PROFILE)
    for r in est.ranks:
        # its table's 8 lookups a step: 8 vectors of 16 B gathered; 8 unique rows read and written, 2 x 16 B each
        assert (r.gather_bytes, r.update_bytes) == (128, 256)
        assert r.compute_s == pytest.approx(128 / 1e9 + 256 / 1e8, rel=1e-12)
        # per collective (messages, bytes) plus the header's (1, 80): key counts (1, 2 streams x 8), keys (1, 4 x 8),
        # rows (1, 4 x 16), gradients (1, 4 x 16), the loss's allreduce (2, 8)
        assert (r.messages, r.link_bytes) == (2 + 2 + 2 + 2 + 3, 96 + 112 + 144 + 144 + 88)
        assert r.comm_s == pytest.approx(11e-6 + 584 / 1e9, rel=1e-12)
        assert r.sent == {"a2a_keys": 48, "a2a_fwd": 64, "a2a_bwd": 64, "loss": 8}
        assert r.total_s == r.compute_s + r.comm_s
    assert est.imbalance == 1.0 and est.step_s == est.ranks[0].total_s


def test_one_rank_puts_nothing_on_the_link():
    spec = TableSpec("a", 1000, 4, rule="SGDRule")
    plan = Plan((RankBudget(10 ** 9),), (Placement(spec, "table", (Shard(0, 1000, (0, 4)),)),), 8, "fp32")
    r = estimate_step(plan, LINK, PROFILE, dense_bytes=10 ** 6).ranks[0]
    assert (r.messages, r.link_bytes, r.comm_s) == (0, 0, 0) and r.compute_s > 0


def row_wise(rows=4, W=2):
    spec = TableSpec("t", rows, 4, pooling=None, rule="SGDRule")
    shards = tuple(Shard(r, rows // W, (0, 4), residue=r) for r in range(W))
    return Plan((RankBudget(10 ** 9),) * W, (Placement(spec, "row", shards),), 8 * W, "fp32")


def test_skew_puts_the_hottest_key_owner_over_the_mean():
    # Zipf 1 over 4 keys: shares 12, 6, 4, 3 out of 25, round-robin on 2 ranks: 16/25 and 9/25 of the lookups
    skewed = estimate_step(row_wise(), FREE_LINK, GATHER_ONLY, {"t": KeySkew(1.0)})
    assert [r.gather_bytes for r in skewed.ranks] == pytest.approx([2 * 8 * 16 * 16 / 25, 2 * 8 * 16 * 9 / 25])
    assert skewed.imbalance == pytest.approx(2 * 16 / 25)
    even = estimate_step(row_wise(), FREE_LINK, GATHER_ONLY, {"t": KeySkew(0.0)})
    assert even.imbalance == pytest.approx(1.0)
    # the owner of the hot key sends the rows of the other rank's 8 x 16/25 lookups, and its keys of the other
    # rank's 9/25 (after the one stream's count)
    hot_owner = skewed.ranks[0].sent
    assert hot_owner["a2a_fwd"] == pytest.approx(8 * 16 / 25 * 16)
    assert hot_owner["a2a_keys"] == pytest.approx(8 + 8 * 9 / 25 * 8)


def test_table_wise_is_unequal_by_table():
    # the same two tables, one skewed: it touches fewer unique rows, so its owner updates less
    est = estimate_step(two_tables(), FREE_LINK, PROFILE, {"a": KeySkew(2.0)})
    assert est.ranks[0].update_bytes < est.ranks[1].update_bytes == 256
    assert est.ranks[0].update_bytes == pytest.approx(KeySkew(2.0).unique_rows(8, 1000) * 32)


def test_dedup_sends_each_distinct_key_of_a_rank_once():
    plain = estimate_step(two_tables(), LINK, PROFILE)
    # no skew known: the bound, min(b·L, rows), is every key of a rank's 4 lookups of 1000 rows
    assert estimate_step(two_tables(), LINK, PROFILE, dedup=True).ranks == plain.ranks
    skew = KeySkew(2.0)
    est = estimate_step(two_tables(), LINK, PROFILE, {"a": skew}, dedup=True)
    D = skew.unique_rows(4, 1000)  # of table a's 4 lookups a rank, about 2.3 distinct keys
    assert 1 < D < 3
    # rank 1 sends a's owner, rank 0, D keys (after the 2 streams' counts) and D gradients; rank 0 returns D rows
    assert est.ranks[1].sent["a2a_keys"] == pytest.approx(16 + 8 * D)
    assert est.ranks[1].sent["a2a_bwd"] == pytest.approx(16 * D) and est.ranks[0].sent["a2a_fwd"] == pytest.approx(
        16 * D)
    assert est.ranks[0].gather_bytes == pytest.approx(2 * D * 16)  # each rank's distinct keys, its own included
    assert est.ranks[1].gather_bytes == plain.ranks[1].gather_bytes == 128  # table b: no skew, every key
    # row-wise over 2 ranks, 4 rows, 8 lookups a rank: at most 4 distinct keys, 2 an owner, against 4 lookups
    rows = estimate_step(row_wise(), LINK, PROFILE, dedup=True).ranks[1].sent
    assert rows["a2a_keys"] == 8 + 2 * 8 and rows["a2a_bwd"] == 2 * 16
    assert estimate_step(row_wise(), LINK, PROFILE).ranks[1].sent["a2a_keys"] == 8 + 4 * 8


def test_hot_rows_move_their_lookups_off_the_link():
    hot = {"a": HotRows("a", 2, 0.75, 0, 0)}  # the 2 hottest rows, 3/4 of the lookups, replicated
    est = estimate_step(two_tables(), LINK, PROFILE, {"a": KeySkew(1.0)}, hot)
    plain = estimate_step(two_tables(), LINK, PROFILE, {"a": KeySkew(1.0)})
    assert est.ranks[1].sent["a2a_keys"] - 16 == pytest.approx(4 * 8 * 0.25 + 0) and \
        plain.ranks[1].sent["a2a_keys"] - 16 == 4 * 8
    assert est.ranks[0].sent["a2a_fwd"] == pytest.approx(4 * 0.25 * 16)
    assert est.ranks[0].sent["hot_allreduce"] == est.ranks[1].sent["hot_allreduce"] == 2 * 4 * 4  # 2(W-1)/W x h x d x 4
    assert est.ranks[1].gather_bytes == pytest.approx(128 + 4 * 0.75 * 16)  # b's 8, then its own hot lookups of a


@pytest.mark.parametrize("kwargs,message", [
    ({"skews": {"nope": KeySkew(1.0)}}, "skews name tables the plan does not have (nope); it has a, b"),
    ({"hot": {"c": HotRows("c", 1, 0.1, 0, 0)}}, "hot name tables the plan does not have (c)"),
    ({"dense_bytes": -1}, "dense_bytes=-1; use bytes >= 0"),
])
def test_bad_input_is_one_line(kwargs, message):
    with pytest.raises(ValueError, match=r"^estimate_step: ") as e:
        estimate_step(two_tables(), LINK, PROFILE, **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


NEAR = Link("near", 2e-6, 10e9)  # the local link of a host: 2 us a message, 10 GB/s
HEADER = (3, 3 * (8 + 4) * 8)  # 4 ranks: the header's ring allgather of (8 + W) int64, on the inter-host link


def two_hosts(kind, rule="SGDRule"):
    """Table t (1000 rows of dim 4, one unpooled lookup a sample) placed ``kind`` over 2 hosts of 2 ranks, a global
    batch of 8 (2 samples a rank): table_row on host 0's ranks 0 and 1; grid, columns [0, 2) there and [2, 4) on
    ranks 2 and 3."""
    spec = TableSpec("t", 1000, 4, pooling=None, rule=rule)
    ranges = [(0, 4)] if kind == "table_row" else [(0, 2), (2, 4)]
    shards = tuple(Shard(2 * h + i, 500, cols, residue=i) for h, cols in enumerate(ranges) for i in range(2))
    return Plan((RankBudget(10 ** 9),) * 4, (Placement(spec, kind, shards),), 8, "fp32", local_ranks=2)


def far_near(collectives):
    """comm_s of ``[(far (messages, bytes), near (messages, bytes))]``: each collective the slower of its links."""
    return sum(max(LINK.seconds(far[0] + HEADER[0], far[1] + HEADER[1]), NEAR.seconds(*near))
               for far, near in collectives)


def test_table_row_over_two_hosts_by_hand():
    est = estimate_step(two_hosts("table_row"), LINK, PROFILE, local_link=NEAR)
    # each owner serves half of every rank's 2 lookups (1 key, 1 row of 16 B per requester) and 4 unique rows;
    # an alltoallv puts one message on the local link (the host's other rank) and two on the inter-host link
    owner, far = est.ranks[0], est.ranks[2]
    assert (owner.gather_bytes, owner.update_bytes, far.gather_bytes, far.update_bytes) == (64, 128, 0, 0)
    loss = ((6, 12), (0, 0))  # allreduce of 8 bytes over 4 ranks, ring, all on the inter-host link
    # counts 8 B a peer; owner 0: keys to rank 1, 8 from each peer; rows to every peer, 16 from rank 1; gradients
    # to rank 1, 16 from every peer
    mine = [((2, 16), (1, 8)), ((2, 16), (1, 8)), ((2, 32), (1, 16)), ((2, 32), (1, 16)), loss]
    assert owner.comm_s == pytest.approx(far_near(mine), rel=1e-12)
    assert owner.sent == {"a2a_keys": 24 + 8, "a2a_fwd": 48, "a2a_bwd": 16, "loss": 12}
    # rank 2 keeps nothing: its keys (8 B) and gradients (16 B) go to both owners, over the inter-host link
    theirs = [((2, 16), (1, 8)), ((2, 16), (1, 0)), ((2, 32), (1, 0)), ((2, 32), (1, 0)), loss]
    assert far.comm_s == pytest.approx(far_near(theirs), rel=1e-12)
    assert far.sent == {"a2a_keys": 24 + 16, "a2a_fwd": 0, "a2a_bwd": 32, "loss": 12}
    assert (owner.messages, owner.link_bytes) == (4 * 6 + 9, 4 * HEADER[1] + 16 + 8 + 16 + 8 + 32 + 16 + 32 + 16
                                                  + 12 + HEADER[1])


def test_grid_over_two_hosts_by_hand():
    est = estimate_step(two_hosts("grid"), LINK, PROFILE, local_link=NEAR)
    # every rank holds half the rows of 2 columns: serves 1 key of each rank's 2 (a row of 8 B), 4 unique rows
    # of 8 B; 2 streams (16 B of counts a peer); keys, rows and gradients 8 B a peer, 1 peer near, 2 far
    loss = ((6, 12), (0, 0))
    want = far_near([((2, 32), (1, 16)), ((2, 16), (1, 8)), ((2, 16), (1, 8)), ((2, 16), (1, 8)), loss])
    for r in est.ranks:
        assert (r.gather_bytes, r.update_bytes) == (32, 64)
        assert r.comm_s == pytest.approx(want, rel=1e-12)
        assert r.sent == {"a2a_keys": 48 + 24, "a2a_fwd": 24, "a2a_bwd": 24, "loss": 12}
    # under row-wise Adagrad the shards of one residue add up their 4 keys' sums (8 B each) across the hosts
    coupled = estimate_step(two_hosts("grid", "RowwiseAdagradRule"), LINK, PROFILE, local_link=NEAR)
    assert [r.sent["column_sums"] for r in coupled.ranks] == [32] * 4


def test_without_a_local_link_every_peer_is_on_the_link():
    one, split = (estimate_step(two_hosts("table_row"), LINK, PROFILE, local_link=k) for k in (None, NEAR))
    assert [r.sent for r in one.ranks] == [r.sent for r in split.ranks]
    # rank 2's keys: 3 messages, 16 B on the one link instead of 2 far and 1 near
    assert one.ranks[2].messages == split.ranks[2].messages and one.ranks[2].comm_s != split.ranks[2].comm_s


def test_pooled_table_row_bags_relay_their_partials_within_the_owners_host_by_hand():
    # bags of 2 keys: each owner holds a key of 1.5 of a rank's 2 bags, and host 0 one of both; a row is 16 B
    spec = TableSpec("t", 1000, 4, lookups_per_sample=2.0, rule="SGDRule")
    shards = tuple(Shard(i, 500, (0, 4), residue=i) for i in range(2))
    plan = Plan((RankBudget(10 ** 9),) * 4, (Placement(spec, "table_row", shards),), 8, "fp32", local_ranks=2)
    owner, far = estimate_step(plan, LINK, PROFILE, local_link=NEAR).ranks[0::2]
    # owner 0 sends rank 1 its partials for rank 1 and, as rank 3's relay there, for rank 3 (24 B each), and relays
    # both of rank 2's bags to it (32 B); it gets rank 1's partials for its own bags and for rank 2's, and sends back
    # their gradients (48 B); its keys: 16 B to rank 1, and the lengths of its 1.5 sub-bags there (12 B)
    assert owner.sent == {"a2a_keys": 24 + 16 + 12, "a2a_fwd": 48 + 32, "a2a_bwd": 48, "loss": 12}
    # rank 2 sends its keys to both owners (16 B each) with their sub-bags' lengths (12 B each) and their places to
    # relay 0 (8 B a sub-bag, 3 of them), and one gradient a bag to relay 0: 32 B, where single-level it sent each
    # owner 24
    assert far.sent == {"a2a_keys": 24 + 32 + 24 + 24, "a2a_fwd": 0, "a2a_bwd": 32, "loss": 12}


@pytest.mark.parametrize("dense, buckets", [(1000, [250] * 4), (1001, [251, 251, 251, 248]),
                                            (40 << 20, [4 << 20] * 10), (3, [1] * 3)])
def test_the_dense_gradients_go_in_the_runtimes_buckets(dense, buckets):
    """A quarter of them a bucket, at most 4 MiB, one allreduce each (distributed/dense.py's default): each a ring
    of 2 (W − 1) messages plus the header's W − 1, and 2 (W − 1) / W of the bucket sent."""
    none, some = (estimate_step(two_tables(), LINK, PROFILE, dense_bytes=n).ranks[0] for n in (0, dense))
    assert some.messages - none.messages == len(buckets) * 3
    assert some.sent["allreduce"] == pytest.approx(sum(buckets))  # 2 (W - 1) / W = 1 of each, at W = 2
    assert some.link_bytes - none.link_bytes == pytest.approx(sum(buckets) + len(buckets) * 80)
