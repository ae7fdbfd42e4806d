"""TableSpec and RankBudget: what they accept, what they refuse and say, and the row widths they give."""
import pytest

from gpuemb import optim
from gpuemb.sharding.spec import RankBudget, TableSpec
from gpuemb.store.options import TableConfig


@pytest.mark.parametrize("rule,width", [("SGDRule", 16), ("RowwiseAdagradRule", 17), ("AdagradRule", 32),
                                        ("AdamRule", 48), ("FtrlRule", 48)])
def test_row_width_follows_the_rule(rule, width):
    spec = TableSpec("t", 10, 16, rule=rule)
    assert spec.row_width() == width
    assert spec.row_width(4) == width // 16 * 4 + (width % 16)  # a column shard's row: its columns and state


def test_from_config_takes_dim_dtype_and_rule():
    config = TableConfig("user", 24, dtype="float16", rule=optim.AdamRule())
    spec = TableSpec.from_config(config, rows=1000, lookups_per_sample=3.5, pooling="mean")
    assert (spec.name, spec.rows, spec.dim, spec.dtype, spec.rule) == ("user", 1000, 24, "float16", "AdamRule")
    assert spec.lookups_per_sample == 3.5 and spec.pooling == "mean" and spec.itemsize == 2
    assert TableSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("kwargs,message", [
    (dict(rows=0), "rows=0; use an int >= 1"),
    (dict(dim=2.5), "dim=2.5; use an int >= 1"),
    (dict(lookups_per_sample=0), "lookups_per_sample=0"),
    (dict(pooling="max"), "pooling='max'; use 'sum', 'mean' or None"),
    (dict(dtype="int8"), "dtype='int8'; use a float dtype"),
    (dict(dtype="nonsense"), "dtype='nonsense'"),
    (dict(rule="LambRule"), "rule='LambRule'; use one of"),
    (dict(sharding="diagonal"), "sharding='diagonal'; use one of auto, table, row, column, data"),
])
def test_bad_table_spec_names_the_field(kwargs, message):
    args = dict(name="t", rows=10, dim=8) | kwargs
    with pytest.raises(ValueError, match="TableSpec\\('t'\\)") as e:
        TableSpec(**args)
    assert message in str(e.value)


def test_rank_budget_checks_itself():
    assert RankBudget(10, 20, 30).to_dict() == {"device_bytes": 10, "host_bytes": 20, "ssd_bytes": 30}
    with pytest.raises(ValueError, match="host_bytes=-1"):
        RankBudget(10, -1)
    with pytest.raises(ValueError, match="device_bytes=0; a rank computes on device rows"):
        RankBudget(0, 10)
    with pytest.raises(ValueError, match="ssd_bytes=1.5"):
        RankBudget(10, 0, 1.5)
