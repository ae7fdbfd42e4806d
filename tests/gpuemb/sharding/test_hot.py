"""Hot rows: the bar a row's share must reach, and the memory that raises it."""
import pytest

from gpuemb.sharding.cost import DEVICE_KEY_BYTES
from gpuemb.sharding.hot import choose_hot_rows
from gpuemb.sharding.plan import Placement, Plan, Shard
from gpuemb.sharding.skew import KeySkew
from gpuemb.sharding.spec import RankBudget, TableSpec

# 4 keys sampled: shares 0.5, 0.3, 0.1, 0.1
SKEW = {"a": KeySkew(hot_keys=(1, 2, 3, 4), hot_shares=(0.5, 0.3, 0.1, 0.1))}


def plan(device_bytes=10 ** 9, W=2):
    spec = TableSpec("a", 4, 4, pooling=None, rule="SGDRule")  # 16-byte rows; 4 x 66 = 264 device bytes
    return Plan((RankBudget(device_bytes),) * W, (Placement(spec, "table", (Shard(0, 4, (0, 4)),)),), 4 * W, "fp32")


def test_rows_over_the_bar():
    # b = 4 lookups a rank, fp32 vectors of 16 B: the bar is 8 x 4 / (4 x (8 + 32)) = 0.2, so 0.5 and 0.3
    hot = choose_hot_rows(plan(), SKEW)["a"]
    assert (hot.rows, hot.share) == (2, pytest.approx(0.8))
    assert hot.memory == 2 * (16 + DEVICE_KEY_BYTES) and hot.allreduce == 2 * 4 * 4 * 2 * (2 - 1) / 2


def test_too_little_memory_raises_the_bar():
    # 100 bytes free on rank 0 (after the table's 264) hold one hot row of 66 bytes: the bar doubles to 0.4
    hot = choose_hot_rows(plan(264 + 100), SKEW)["a"]
    assert (hot.rows, hot.share) == (1, 0.5)


def test_one_rank_or_no_skew_replicates_nothing():
    assert choose_hot_rows(plan(W=1), SKEW) == {}
    assert choose_hot_rows(plan(), {}) == {}
