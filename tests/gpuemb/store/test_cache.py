import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.optim import AdamRule
from gpuemb.store.errors import StoreFullError
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

D = 4


def table(tmp_path=None, **options):
    if options.get("placement") == "ssd":
        options["ssd_path"] = str(tmp_path / "home.h5")
    return EmbeddingTable(TableConfig("t", D, initializer=Initializer("uniform", 0.5, seed=9), rule=AdamRule(),
                                      lr=0.1, options=StoreOptions(slab_rows=32, chunk_rows=8, **options)))


def step(t, keys, offsets=None, mode=None, seed=0):
    y = t.lookup(keys, offsets, mode)
    (y * Tensor(np.random.default_rng(seed).standard_normal(y.shape).astype(np.float32))).sum().backward()
    return to_host(y.data)


def everything(t):
    return {k: (r, s) for ks, rows, st in t.export() for k, r, s in zip(ks.tolist(), rows, st.tolist())}


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("home", ["host", "ssd", "ssd+host"])
def test_tiered_table_trains_bit_for_bit_like_the_device_table(policy, home, rng, tmp_path):
    options = {"placement": home.split("+")[0], "cache_rows": 48, "policy": policy}
    if home == "ssd+host":
        options["host_cache_rows"] = 96
    tiered, device = table(tmp_path, **options), table()
    for i in range(25):
        sizes = rng.integers(0, 4, 12)
        keys = rng.zipf(1.3, sizes.sum()) % 400 * 104729  # hot and cold keys over a space 8x the cache
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        if i % 3:
            tiered.prefetch(keys)
        np.testing.assert_array_equal(step(tiered, keys, offsets, "mean", i), step(device, keys, offsets, "mean", i))
    top = tiered.stats()["levels"][0]
    assert top["evictions"] > 0 and 0 < top["hit_rate"] < 1 and len(tiered) > 48
    got, want = everything(tiered), everything(device)
    assert got.keys() == want.keys()
    for k, (row, s) in want.items():
        np.testing.assert_array_equal(got[k][0], row)
        assert got[k][1] == s


@pytest.mark.parametrize("placement", ["host", "ssd"])
def test_evicted_dirty_rows_are_written_down(placement, tmp_path):
    t = table(tmp_path, placement=placement, cache_rows=8)
    step(t, np.array([1, 2, 3]))
    updated = to_host(t.top.tier.read(t.top.locate(np.array([1, 2, 3]))))
    home = t.home
    assert not np.array_equal(to_host(home.tier.read(home.locate(np.array([1, 2, 3])))), updated)  # not yet
    written = home.tier.bytes_written
    with no_grad():
        t.lookup(np.arange(100, 108))  # fills the cache: 1, 2, 3 go
    assert (t.top.locate(np.array([1, 2, 3])) < 0).all()
    np.testing.assert_array_equal(to_host(home.tier.read(home.locate(np.array([1, 2, 3])))), updated)
    assert home.tier.bytes_written > written
    with no_grad():
        t.lookup(np.arange(200, 205))  # evicts clean rows only: nothing more written down for them
    assert t.top.dirty[t.top.locate(np.arange(200, 205))].sum() == 0


def test_prefetched_and_in_flight_rows_stay_pinned(tmp_path):
    t = table(tmp_path, placement="host", cache_rows=8)
    t.prefetch(np.array([0, 1, 2, 3]))
    y = t.lookup(np.array([10, 11, 12, 13]))  # takes over the prefetch pins: 0..3 unpinned, 10..13 pinned
    t.prefetch(np.array([0, 1, 2, 3]))  # pinned again, for the next batch
    with pytest.raises(StoreFullError, match="raise cache_rows to at least 9"):
        t.lookup(np.array([20]))  # all 8 rows pinned: nothing can go
    y.sum().backward()  # the update releases 10..13
    with no_grad():
        t.lookup(np.arange(20, 24))
    assert (t.top.locate(np.arange(4)) >= 0).all() and (t.top.locate(np.arange(10, 14)) < 0).all()
    hits = t.top.hits
    step(t, np.arange(4))
    assert t.top.hits == hits + 4


def test_hit_rate_and_bytes_moved(tmp_path):
    t = table(tmp_path, placement="ssd", cache_rows=16, host_cache_rows=32)
    with no_grad():
        t.lookup(np.arange(10))
        t.lookup(np.arange(5, 15))
    dev, host, ssd = t.stats()["levels"]
    assert (dev["hits"], dev["misses"]) == (5, 15) and dev["hit_rate"] == 0.25
    assert (host["hits"], host["misses"]) == (0, 15) and ssd["misses"] == 15  # all new: made at the home
    # on a device the masked write rewrites a batch's hits with their own rows (so no count leaves the device): 10
    # + 10 rows written for 15 misses; on the host it writes the 15 missed rows alone
    written = 20 if backend.is_device_array(t.top.tier.rows) else 15
    assert ssd["tier"] == "SsdTier" and ssd["bytes_written"] > 0
    assert dev["bytes_written"] == written * t.home.tier.spec.row_bytes


def test_a_batch_bigger_than_the_cache_names_the_size_needed(tmp_path):
    t = table(tmp_path, placement="ssd", cache_rows=8)
    with pytest.raises(StoreFullError, match="cache_rows=8.*raise cache_rows to at least 9"):
        t.lookup(np.arange(9))


def test_room_counts_the_pins_held_without_reading_the_device(tmp_path, rng):
    t = table(tmp_path, placement="host", cache_rows=16)
    assert t.room() == 16
    keys = rng.choice(1000, 6, replace=False)
    y = t.lookup(keys)
    t.prefetch(rng.choice(np.arange(1000, 2000), 3, replace=False))
    assert t.room() == 16 - 9 == 16 - t.top.policy.n_pinned()  # the pins the device holds, counted on the host
    y.sum().backward()  # the update releases the lookup's
    assert t.room() == 16 - 3 == 16 - t.top.policy.n_pinned()
    assert table(tmp_path, placement="device").room() is None  # unbounded: every prefetch fits
