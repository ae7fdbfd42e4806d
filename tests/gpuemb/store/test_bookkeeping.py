"""The store's bytes a key beside its rows (issue 18: at most 24 at an ssd home), measured by ``stats()``, and that
keeping only what each level reads changes no result."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.optim import AdagradRule
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

D, KEYS, BLOCK = 4, 300_000, 25_000


def table(tmp_path, placement, **options):
    if placement == "ssd":
        options.update(ssd_path=str(tmp_path / "t.h5"), chunk_rows=64)
    options = StoreOptions(placement, slab_rows=1 << 12, **options)
    return EmbeddingTable(TableConfig("t", D, initializer=Initializer("uniform", 0.5, seed=4), rule=AdagradRule(),
                                      lr=0.1, options=options))


def home_bytes_per_key(t, keys, rng):
    """The home's bookkeeping bytes a key after each block of ``keys`` imported, and its last ``stats()``."""
    per_key = []
    for start in range(0, keys.size, BLOCK):
        block = keys[start:start + BLOCK]
        rows = rng.standard_normal((block.size, t.home.tier.width)).astype(np.float32)
        t.import_rows(block, rows, rng.integers(0, 100, block.size).astype(np.int32))
        s = t.stats()
        per_key.append(s["levels"][-1]["overhead_bytes_per_key"])
    return per_key, s


@pytest.mark.parametrize("placement", ["host", "ssd"])
def test_a_home_keeps_its_index_allocator_and_no_more(placement, tmp_path, rng):
    t = table(tmp_path, placement, cache_rows=64)
    keys = rng.choice(1 << 60, KEYS, replace=False)
    per_key, s = home_bytes_per_key(t, keys, rng)
    home = s["levels"][-1]
    assert s["keys"] == home["rows"] == KEYS and s["index_bytes"] > 12 * 1024 * 8  # rehashed many times
    index_allocator = s["index_bytes"] + s["allocator_bytes"] + t.home.counters.nbytes
    if placement == "ssd":
        # The key index, 12 B an entry at a load of 0.57 to 0.8 (15 to 21 B a key), and the allocator's used flag
        # (at most 1.25 B a row: it grows a quarter ahead); the steps are in the file beside the rows, and an
        # unbounded home keeps no key, dirty flag or eviction state.
        assert home["overhead_bytes"] == index_allocator
        assert max(per_key) <= 24, per_key
    else:  # the same plus the steps, 4 B a slot of the tier, grown a quarter ahead
        assert home["overhead_bytes"] == index_allocator + t.home.steps.nbytes
        assert max(per_key) <= 24 + 4 * 1.25, per_key
    assert s["overhead_bytes_per_key"] * KEYS == sum(level["overhead_bytes"] for level in s["levels"])
    t.close()


def everything(t):
    return {k: (r, s) for ks, rows, st in t.export() for k, r, s in zip(ks.tolist(), rows, st.tolist())}


def test_every_kind_of_level_trains_bit_for_bit_alike(tmp_path, rng):
    """Bounded and unbounded device homes, a host home and an ssd home under a host cache: the same lookups and
    rows, whichever bookkeeping each level keeps, while small caches move rows up and down."""
    tables = [table(tmp_path, "device"), table(tmp_path, "device", max_rows=1 << 12),
              table(tmp_path, "host", cache_rows=40), table(tmp_path, "ssd", cache_rows=40, host_cache_rows=80)]
    for _ in range(30):
        keys = rng.integers(0, 300, 32) * 7919  # ~30 unique keys a step over 300: misses and evictions every step
        gy = Tensor(rng.standard_normal((keys.size, D)).astype(np.float32))
        got = []
        for t in tables:
            y = t.lookup(keys)
            (y * gy).sum().backward()
            got.append(to_host(y.data))
        for other in got[1:]:
            np.testing.assert_array_equal(other, got[0])
    assert all(t.stats()["levels"][0]["evictions"] > 0 for t in tables[2:])
    want = everything(tables[0])
    for t in tables[1:]:
        rows = everything(t)
        assert rows.keys() == want.keys()
        for k, (row, steps) in want.items():
            np.testing.assert_array_equal(rows[k][0], row)
            assert rows[k][1] == steps
        t.close()
