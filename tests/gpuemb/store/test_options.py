import math

import pytest

from gpuemb.optim import AdamRule, FtrlRule, RowwiseAdagradRule, SGDRule
from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig


@pytest.mark.parametrize("rule", [SGDRule(momentum=0.5), AdamRule(betas=(0.8, 0.9)), RowwiseAdagradRule(eps=1e-6),
                                  FtrlRule()])
def test_config_round_trips_through_a_dict(rule):
    config = TableConfig("t", 12, "float16", Initializer("truncated_normal", 0.2, seed=7), rule, 0.3,
                         StoreOptions("ssd", cache_rows=64, host_cache_rows=128, ssd_path="x.h5", policy="lfu"),
                         evict=EvictionRule(min_count=2, score="l2", below=0.5), rounding="stochastic")
    back = TableConfig.from_dict(config.to_dict())
    assert back.to_dict() == config.to_dict()
    assert type(back.rule) is type(rule) and back.options == config.options and back.initializer.seed == 7
    assert back.evict == config.evict and back.rounding == "stochastic"


def test_a_config_saved_before_rounding_reads_as_nearest():
    saved = TableConfig("t", 4, "float16").to_dict()
    del saved["rounding"]
    assert TableConfig.from_dict(saved).rounding == "nearest"


def test_initializer_scale_defaults_to_one_over_sqrt_dim():
    assert math.isclose(Initializer().scale_for(16), 0.25)
    assert Initializer(scale=0.5).scale_for(16) == 0.5


@pytest.mark.parametrize("make, words", [
    (lambda: Initializer("gaussian"), "uniform, normal"),
    (lambda: Initializer(scale=-1.0), "scale=-1.0"),
    (lambda: Initializer(seed=-3), "seed=-3"),
    (lambda: StoreOptions(placement="gpu"), "device, host, ssd"),
    (lambda: StoreOptions(policy="fifo"), "lru, lfu"),
    (lambda: StoreOptions(cache_rows=8), "choose placement='host'"),
    (lambda: StoreOptions(placement="host"), "cache_rows >= 1"),
    (lambda: StoreOptions(placement="ssd", cache_rows=8), "give an ssd_path"),
    (lambda: StoreOptions(placement="host", cache_rows=8, host_cache_rows=8), "choose placement='ssd'"),
    (lambda: StoreOptions(placement="host", cache_rows=8, max_rows=100), "drop max_rows"),
    (lambda: StoreOptions(max_rows=0), "max_rows=0"),
    (lambda: StoreOptions("ssd", 8, ssd_path="x.h5", slab_rows=100, chunk_rows=64), "must divide slab_rows=100"),
    (lambda: TableConfig("", 4), "non-empty"),
    (lambda: TableConfig("t", 0), "dim=0"),
    (lambda: TableConfig("t", 4, dtype="int32"), "use one of float32, float16, float64"),
    (lambda: TableConfig("t", 4, lr=float("nan")), "lr=nan"),
    (lambda: TableConfig("t", 4, "float16", rounding="up"), "use one of nearest, stochastic"),
    (lambda: TableConfig("t", 4, rounding="stochastic"), "give dtype='float16'"),
    (lambda: EvictionRule(), "no criterion given"),
    (lambda: EvictionRule(score="l2"), "give both or neither"),
    (lambda: EvictionRule(below=0.5), "give both or neither"),
    (lambda: EvictionRule(score="norm", below=0.5), "use one of l2, count, recency"),
    (lambda: EvictionRule(score="l2", below=float("inf")), "below=inf; use a finite number"),
])
def test_bad_settings_say_what_to_change(make, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        make()
