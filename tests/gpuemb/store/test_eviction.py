"""Eviction by a rule and deletion (``EmbeddingTable.evict``/``delete``): the keys a NumPy reference picks leave
every level, their slots are reused, pinned keys stay, and a table on a drifting key stream stays bounded."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, launches, transfers
from gpuemb.autograd.backend import get_array_module, to_device, to_host
from gpuemb.optim import SGDRule
from gpuemb.store.options import EvictionRule, Initializer, StoreOptions, TableConfig
from gpuemb.store.scores import score
from gpuemb.store.table import EmbeddingTable

D = 4
OPTIONS = {"device": lambda tmp: StoreOptions(slab_rows=64),
           "host": lambda tmp: StoreOptions("host", cache_rows=48, slab_rows=64),
           "ssd": lambda tmp: StoreOptions("ssd", cache_rows=48, host_cache_rows=64, ssd_path=str(tmp / "t.h5"),
                                           slab_rows=64, chunk_rows=16)}


def table(tmp_path, placement="device", **more):
    more.setdefault("evict", EvictionRule(ttl_steps=1))
    return EmbeddingTable(TableConfig("t", D, initializer=Initializer("normal", 0.5, seed=5), rule=SGDRule(),
                                      lr=0.1, options=OPTIONS[placement](tmp_path), **more))


def step(t, keys, rng, ticks=None):
    """One training batch; ``ticks``: the reference's last update tick per key, kept as the table's clock runs."""
    y = t.lookup(keys)
    (y * Tensor(to_device(rng.standard_normal(y.shape).astype(np.float32)))).sum().backward()
    if ticks is not None:
        ticks["clock"] = ticks.get("clock", 0) + 1
        ticks.update({k: ticks["clock"] for k in np.unique(keys).tolist()})


def state(t):
    return {k: (r, s) for ks, rows, st in t.export() for k, r, s in zip(ks.tolist(), rows, st.tolist())}


def expected(rows, ticks, rule, dim=D):
    """The keys a rule picks, from the exported rows and steps and the reference's ticks."""
    out = set()
    for k, (row, steps) in rows.items():
        hit = rule.ttl_steps is None or ticks["clock"] - ticks[k] >= rule.ttl_steps
        hit &= rule.min_count is None or steps < rule.min_count
        hit &= rule.max_l2 is None or np.linalg.norm(row[:dim].astype(np.float64)) < rule.max_l2
        out.add(k) if hit else None
    return out


RULES = [EvictionRule(ttl_steps=6), EvictionRule(min_count=3), EvictionRule(max_l2=0.9),
         EvictionRule(ttl_steps=3, min_count=4, max_l2=1.2)]


@pytest.mark.parametrize("placement", ["device", "host", "ssd"])
@pytest.mark.parametrize("rule", RULES, ids=["ttl", "min_count", "max_l2", "all_three"])
def test_evict_drops_what_the_rule_picks_from_every_level(placement, rule, tmp_path, rng):
    t, ticks = table(tmp_path, placement), {}
    for _ in range(25):
        step(t, rng.integers(0, 120, 30) * 31, rng, ticks)
    before = state(t)
    want = expected(before, ticks, rule)
    assert 0 < len(want) < len(before)
    assert t.evict(rule) == len(want)
    after = state(t)
    assert after.keys() == before.keys() - want
    for k, (row, steps) in after.items():  # the survivors are as they were
        np.testing.assert_array_equal(row, before[k][0])
        assert steps == before[k][1]
    gone = np.array(sorted(want), np.int64)
    for level in t.levels:  # no cache keeps a copy to write back or read again
        assert (to_host(level.locate(level.here(gone))) < 0).all()
    t.close()


def test_the_slots_of_evicted_keys_are_reused(tmp_path, rng):
    t = table(tmp_path, "host")
    for start in range(0, 20_000, 40):  # new keys every batch; evicting all but the last few keeps the tiers small
        step(t, np.arange(start, start + 40), rng)
        t.evict(EvictionRule(ttl_steps=2))
        if start == 2_000:
            sizes = [level.tier.capacity for level in t.levels]
    assert [level.tier.capacity for level in t.levels] == sizes and len(t) <= 80
    t.close()


def test_pinned_keys_are_left_for_the_next_evict(tmp_path, rng, xp):
    t = table(tmp_path, "device")
    for _ in range(5):
        step(t, rng.integers(0, 50, 20), rng)
    everything = EvictionRule(min_count=10 ** 6)
    in_flight = np.unique(rng.integers(0, 50, 20))
    y = t.lookup(in_flight)  # pinned until its backward
    ahead = np.unique(rng.integers(0, 50, 10))
    t.prefetch(ahead)  # pinned until its batch's update
    pinned = np.union1d(in_flight, ahead)
    kept = np.intersect1d(pinned, np.concatenate(list(t.keys())))
    held = len(t)
    assert t.evict(everything) == held - len(kept)
    assert sorted(np.concatenate(list(t.keys())).tolist()) == kept.tolist()
    y.sum().backward()
    step(t, ahead, rng)
    assert t.evict(everything) == len(pinned) and len(t) == 0
    t.close()


def test_delete_drops_given_keys_and_their_counts(tmp_path, rng, xp):
    t = table(tmp_path, "host", admit_after=2)
    keys = rng.choice(1000, 60, replace=False)
    for _ in range(2):
        step(t, keys[:40], rng)  # admitted
    step(t, keys[40:], rng)  # counted once
    doomed = np.concatenate([keys[:10], keys[45:50], [10 ** 9]])  # rows, pending counts, an absent key
    assert t.delete(doomed) == 10
    assert sorted(np.concatenate(list(t.keys())).tolist()) == sorted(keys[10:40].tolist())
    counted = np.concatenate([k for k, *_ in t.admission.counts()])
    assert sorted(counted.tolist()) == sorted(np.setdiff1d(keys[40:], keys[45:50]).tolist())
    t.close()


def test_a_drifting_stream_stays_bounded_with_ttl_eviction(tmp_path, rng):
    """4,000 batches whose hot range moves every 400: TTL eviction every 50 batches keeps the rows under 2 ranges'
    worth (the hot range plus what has not expired yet), while the table without eviction holds every range."""
    ranges, width, bound = 10, 300, 2 * 300
    evicting = table(tmp_path, "device", evict=EvictionRule(ttl_steps=100), evict_every=50)
    keeping = EmbeddingTable(TableConfig("t", D, rule=SGDRule(), options=StoreOptions(slab_rows=64)))
    most = 0
    for i in range(ranges * 400):
        base = (i // 400) * width
        keys = base + rng.integers(0, width, 8)
        for t in (evicting, keeping):
            step(t, keys, rng)
        most = max(most, len(evicting))
    assert most <= bound < len(keeping), (most, len(keeping))
    assert len(keeping) > (ranges - 1) * width


def test_pending_keys_of_a_drifting_stream_age_out(tmp_path, rng):
    """1,200 batches of 8 hot keys and 4 keys seen once, admitted after 2 batches: TTL eviction of 100 every 50
    batches keeps the pending keys under what 150 batches count (600) plus the hot range (300); without it every
    key seen once stays pending."""
    width, bound = 300, 4 * 150 + 300
    evicting = table(tmp_path, "device", admit_after=2, evict=EvictionRule(ttl_steps=100), evict_every=50)
    keeping = table(tmp_path, "device", admit_after=2, evict=None)
    most = 0
    for i in range(1200):
        keys = np.concatenate([(i // 400) * width + rng.integers(0, width, 8), rng.integers(10 ** 6, 10 ** 15, 4)])
        for t in (evicting, keeping):
            step(t, keys, rng)
        most = max(most, len(evicting.admission))
    assert most <= bound < 4 * 1200 <= len(keeping.admission), (most, len(keeping.admission))
    assert 4 * 100 <= most  # what the TTL keeps: every cold key of the last 100 batches


@score("test_weight_sum_per_update", reads=("weights", "steps"))
def weight_sum_per_update(keys, weights, steps, ages):
    """A score of the kind a user writes: the weights' sum per update, odd keys kept whatever they hold."""
    xp = get_array_module(weights)
    return weights.sum(1) / steps + xp.where(keys % 2 == 1, 1e9, 0.0)


@pytest.mark.parametrize("general, criterion", [
    (EvictionRule(score="l2", below=0.9), EvictionRule(max_l2=0.9)),
    (EvictionRule(score="count", below=3), EvictionRule(min_count=3)),
    (EvictionRule(score="recency", below=1 - 6), EvictionRule(ttl_steps=6)),
], ids=["l2", "count", "recency"])
def test_a_criterion_is_a_setting_of_a_score_and_threshold(general, criterion, tmp_path, rng):
    """Two tables trained alike: the score named with a threshold drops what the criterion drops."""
    twins, ticks = [table(tmp_path, "device", evict=general), table(tmp_path, "device", evict=criterion)], {}
    for _ in range(25):
        keys, seed = rng.integers(0, 120, 30) * 31, int(rng.integers(1 << 30))
        for i, t in enumerate(twins):
            step(t, keys, np.random.default_rng(seed), ticks if i == 0 else None)
    want = expected(state(twins[0]), ticks, criterion)
    assert 0 < len(want) < len(twins[0]) and [t.evict() for t in twins] == [len(want)] * 2
    assert state(twins[0]).keys() == state(twins[1]).keys()


@pytest.mark.parametrize("placement", ["device", "host"])
def test_a_registered_score_evicts_what_it_scores_below_the_threshold(placement, tmp_path, rng, xp):
    rule = EvictionRule(min_count=4, score="test_weight_sum_per_update", below=-0.05)
    t = table(tmp_path, placement, evict=rule)
    for _ in range(25):
        step(t, rng.integers(0, 120, 30), rng)
    before = state(t)
    want = {k for k, (row, steps) in before.items()
            if steps < 4 and k % 2 == 0 and row[:D].astype(np.float64).sum() / steps < -0.05}
    assert 0 < len(want) and t.evict() == len(want)
    assert state(t).keys() == before.keys() - want
    t.close()


def test_a_score_reading_ages_needs_the_ticks_a_rule_in_the_config_keeps(tmp_path, rng):
    aged = EvictionRule(score="recency", below=-2)
    plain = table(tmp_path, "device", evict=EvictionRule(min_count=2))
    step(plain, rng.integers(0, 50, 20), rng)
    with pytest.raises(ValueError, match="score='recency' needs each key's last update tick"):
        plain.evict(aged)
    assert table(tmp_path, "device", evict=aged).home.touched is not None  # the config's rule keeps them


@pytest.mark.gpu
def test_scores_add_no_readbacks_to_an_evict(tmp_path, rng):
    """On the device the scores run where the rows are: an evict by every criterion and a user's score reads back
    what one by a single criterion does, the chunk's evicted keys (and nothing at the steps between evictions)."""
    counts = []
    for rule in (EvictionRule(min_count=3), EvictionRule(ttl_steps=6, min_count=3, max_l2=0.9,
                                                         score="test_weight_sum_per_update", below=0.0)):
        t = table(tmp_path, "device", evict=rule)
        for _ in range(10):
            step(t, rng.integers(0, 120, 30), rng)
        before, moved = launches.COUNTS.snapshot(this_thread=True), transfers.COUNTS.snapshot()
        t.evict()
        counts.append((launches.COUNTS.since(before, this_thread=True)["readbacks"],
                       transfers.COUNTS.since(moved)["to_host"]))
    assert counts[0] == counts[1], counts
