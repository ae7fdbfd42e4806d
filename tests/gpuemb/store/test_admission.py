"""Admission (``TableConfig(admit_after=N)``): a key trains only from its N-th batch on, reading zeros before,
against a dict reference, on every placement, with prefetches, evaluation reads and skipped steps between."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.distributed import load_sharded
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.optim import SGDRule
from gpuemb.sharding.plan import owner_hash
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.snapshot import load_snapshot, save_snapshot
from gpuemb.store.table import EmbeddingTable

D, LR = 4, 0.1
INIT = Initializer("normal", 0.5, seed=7)


def table(tmp_path, placement, admit_after, **more):
    options = {"device": StoreOptions(), "host": StoreOptions("host", cache_rows=64),
               "ssd": StoreOptions("ssd", cache_rows=64, host_cache_rows=96, ssd_path=str(tmp_path / "t.h5"),
                                   slab_rows=256, chunk_rows=16)}[placement]
    return EmbeddingTable(TableConfig("t", D, initializer=INIT, rule=SGDRule(), lr=LR, options=options,
                                      admit_after=admit_after, **more))


class Reference:
    """Counts, rows and steps per key in dicts: the definition of admission."""

    def __init__(self, after):
        self.after, self.counts, self.rows, self.steps = after, {}, {}, {}

    def lookup(self, keys, insert=True):
        for k in np.unique(keys).tolist():
            if k in self.rows or not insert:
                continue
            self.counts[k] = self.counts.get(k, 0) + 1
            if self.counts[k] >= self.after:
                del self.counts[k]
                self.rows[k] = initial_weights(INIT, np.array([k]), D, "float32")[0].astype(np.float64)
                self.steps[k] = 0
        return np.stack([self.rows.get(k, np.zeros(D)) for k in keys.tolist()])

    def update(self, keys, gy):
        grads = {}
        for k, g in zip(keys.tolist(), gy):
            grads[k] = grads.get(k, 0) + g
        for k, g in grads.items():
            if k in self.rows:
                self.rows[k] = self.rows[k] - LR * g
                self.steps[k] += 1


def rows_of(t):
    return {k: (r, s) for ks, rows, st in t.export() for k, r, s in zip(ks.tolist(), rows, st.tolist())}


@pytest.mark.parametrize("placement", ["device", "host", "ssd"])
@pytest.mark.parametrize("after", [2, 3])
def test_a_key_trains_from_its_nth_batch_on(placement, after, tmp_path, rng):
    t, ref = table(tmp_path, placement, after), Reference(after)
    for step in range(40):
        keys = rng.integers(0, 500, 20) * 1009
        if step % 5 == 2:  # an evaluation read between: pending keys read zeros and are not counted
            seen = rng.integers(0, 500, 10) * 1009
            np.testing.assert_allclose(to_host(t.lookup(seen, insert=False).data), ref.lookup(seen, insert=False),
                                       rtol=1e-5, atol=1e-6)
        if step % 3 == 1:  # the pipeline's prefetch: it pins nothing and counts nothing; the lookup does
            assert t.prefetch(keys) is False and not t.in_flight.prefetched
        skip = step % 7 == 3  # a loss-scaled step that is skipped: admitted keys keep their rows untrained
        if skip:
            t.hold_updates()
        y = t.lookup(keys)
        np.testing.assert_allclose(to_host(y.data), ref.lookup(keys), rtol=1e-5, atol=1e-6)
        gy = rng.standard_normal((keys.size, D)).astype(np.float32)
        (y * Tensor(to_device(gy))).sum().backward()
        if skip:
            t.release_updates(apply=False)
        else:
            ref.update(keys, gy)
    got = rows_of(t)
    assert got.keys() == ref.rows.keys() and len(ref.counts) > 0
    for k, (row, steps) in got.items():
        np.testing.assert_allclose(row, ref.rows[k], rtol=1e-5, atol=1e-6)
        assert steps == ref.steps[k]
    assert counts_of(t) == ref.counts
    t.close()


def test_a_prefetch_counts_nothing(tmp_path, rng):
    """A prefetch of keys never looked up leaves the counts as they were: admission happens in the lookup, in
    batch order (a prefetch runs on a worker thread, before or after the previous batch's update)."""
    t, ref = table(tmp_path, "device", 2), Reference(2)
    for _ in range(2):
        keys = rng.integers(0, 30, 12)
        ref.lookup(keys)
        t.lookup(keys)
    counts = counts_of(t)
    assert t.prefetch(rng.integers(100, 130, 12)) is False
    assert counts_of(t) == counts and len(t) == len(ref.rows)
    keys = rng.integers(0, 30, 12)
    np.testing.assert_allclose(to_host(t.lookup(keys).data), ref.lookup(keys), rtol=1e-6)


def test_a_counted_key_costs_an_index_entry_and_nothing_else(tmp_path, rng):
    """300,000 keys each seen once: no rows, and 12 B an index entry at a load of 0.57 to 0.8."""
    t = table(tmp_path, "host", 2)
    keys = rng.choice(1 << 60, 300_000, replace=False)
    per_key = []
    for start in range(0, keys.size, 25_000):
        t.lookup(keys[start:start + 25_000])  # no backward: a count is all a pending key gets
        per_key.append(t.admission.nbytes / len(t.admission))
    assert len(t) == 0 and len(t.admission) == keys.size
    assert 12 / 0.8 <= min(per_key) and max(per_key) <= 12 * 1.4 / 0.8 + 0.01, per_key
    t.close()


def counts_of(t):
    return {k: c for ks, cs, _ in t.admission.counts() for k, c in zip(ks.tolist(), cs.tolist())}


def test_counts_are_saved_and_restored(tmp_path, rng):
    """A restored table has the saved rows and counts, and trains on exactly as the saved one."""
    t, ref = table(tmp_path, "device", 3), Reference(3)
    for _ in range(10):
        keys = rng.integers(0, 300, 20)
        ref.lookup(keys)
        (t.lookup(keys) * 1).sum().backward()
    save_snapshot(t, tmp_path / "s.h5")
    back = table(tmp_path, "host", 3)
    load_snapshot(back, [tmp_path / "s.h5"])
    assert counts_of(back) == counts_of(t) == ref.counts and len(ref.counts) > 10
    for _ in range(5):
        keys = rng.integers(0, 300, 20)
        gy = rng.standard_normal((keys.size, D)).astype(np.float32)
        for u in (t, back):
            (u.lookup(keys) * Tensor(to_device(gy))).sum().backward()
    assert counts_of(back) == counts_of(t)
    assert rows_of(back).keys() == rows_of(t).keys()


def test_counts_reshard_from_two_ranks_to_three(tmp_path, rng, row_rank):
    """Each of 3 new ranks takes the counts of the keys its plan gives it from the 2 old ranks' files."""
    want = {}
    for r in range(2):  # the files of a row-wise save of 2 ranks
        t = table(tmp_path, "device", 4)
        for _ in range(6):
            keys = rng.integers(0, 400, 30) * 2 + r  # rank r owned the keys of parity r
            t.lookup(keys)
        want.update(counts_of(t))
        mark = {"id": "save", "rank": r, "world_size": 2, "shards": {"t": {"kind": "row", "cols": [0, D], "dim": D}}}
        save_snapshot(t, tmp_path / f"s{r}.h5", meta={"sharded": mark})
    got = {}
    for rank in range(3):
        new = row_rank(rank, 3, table(tmp_path, "device", 4))
        load_sharded(new, [tmp_path / "s0.h5", tmp_path / "s1.h5"])
        mine = counts_of(new.shards["t"].table)
        assert all(owner_hash(np.array([k]))[0] % 3 == rank for k in mine)
        got.update(mine)
    assert got == want and len(want) > 100

