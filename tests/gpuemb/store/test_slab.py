from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuemb.store.errors import RowStateError, StoreFullError
from gpuemb.store.slab import SlabAllocator, grown_to
from gpuemb.store.tiers import DeviceTier, TierSpec

SLAB = 8


class CountingTier(DeviceTier):
    """A device tier that counts its slabs, so a test sees growth one slab at a time."""

    def __init__(self):
        super().__init__(TierSpec(width=1, slab_rows=SLAB, chunk_rows=SLAB))
        self.grown = []

    def add_slab(self):
        super().add_slab()
        self.grown.append(self.capacity)


# An op is ("alloc", n, _) or ("free", n, seed): free n of the rows in use, picked by seed.
OPS = st.lists(st.tuples(st.sampled_from(["alloc", "free"]), st.integers(0, 30), st.integers(0, 2**31)),
               max_size=40)


def run(ops, max_rows=None):
    """Replay ``ops`` against an allocator and a model (the set of rows in use); return the ids handed out."""
    tier = CountingTier()
    a, used, bump, handed = SlabAllocator(tier, max_rows), set(), 0, []
    for kind, n, seed in ops:
        before = a.stats()
        if kind == "free":
            ids = np.random.default_rng(seed).permutation(sorted(used))[:n].astype(np.int64)
            a.free(ids)
            used -= set(ids.tolist())
        elif max_rows is not None and n > max_rows - len(used):
            with pytest.raises(StoreFullError, match=f"alloc\\({n}\\).*max_rows={max_rows}"):
                a.alloc(n)
            assert a.stats() == before, "a refused alloc must change nothing"
        else:
            ids = a.alloc(n)
            got = ids.tolist()
            assert ids.dtype == np.int64 and len(set(got)) == n and not used & set(got)
            assert all(0 <= i < a.capacity for i in got)
            holes = bump - len(used)
            assert sum(i >= bump for i in got) == max(0, n - holes), "freed rows are reused before fresh ones"
            used |= set(got)
            bump = max([bump] + [i + 1 for i in got])
            handed.append(got)
        s = a.stats()
        assert s.used == len(used) and s.used + s.free == s.capacity
        assert s.capacity == tier.capacity == -(-bump // SLAB) * SLAB
        assert tier.grown == list(range(SLAB, s.capacity + 1, SLAB)), "grows one slab at a time"
        assert s.slabs == s.capacity // SLAB and s.storage_bytes == s.capacity * 4
        assert s.fragmentation == ((bump - len(used)) / s.capacity if s.capacity else 0.0)
    return a, handed


@settings(max_examples=60, deadline=None)
@given(OPS, st.sampled_from([None, 2 * SLAB, 5 * SLAB]))
def test_allocator_matches_model(ops, max_rows):
    a, handed = run(ops, max_rows)
    assert run(ops, max_rows)[1] == handed, "the same calls give the same ids"
    if max_rows is not None:
        assert a.capacity <= max_rows


@settings(max_examples=30, deadline=None)
@given(OPS, st.integers(1, 20))
def test_state_dict_round_trip(ops, n):
    a, _ = run(ops)
    b = SlabAllocator(CountingTier())
    b.load_state_dict(a.state_dict())
    # the allocator's own arrays may be sized differently after a restore; everything else is the same
    assert replace(b.stats(), overhead_bytes=0) == replace(a.stats(), overhead_bytes=0)
    np.testing.assert_array_equal(b.alloc(n), a.alloc(n))


def test_overhead_is_a_few_bytes_per_row():
    a = SlabAllocator(CountingTier())
    ids = a.alloc(1000)
    a.free(ids[::10])
    s = a.stats()
    # one used flag per row of capacity (doubling: at most two) plus the free stack (doubling: at most 16 B a row)
    assert s.overhead_bytes <= 2 * s.capacity + 16 * 100
    assert s.overhead_bytes / s.used < 4


def test_double_free_and_strangers_raise_and_free_nothing():
    a = SlabAllocator(CountingTier())
    ids = a.alloc(20)
    a.free(ids[:3])
    before = a.stats()
    with pytest.raises(RowStateError, match=f"row {ids[1]} at position 1 is already free"):
        a.free(np.array([ids[5], ids[1]]))
    with pytest.raises(RowStateError, match="row 7 at position 1 appears twice"):
        a.free(np.array([7, 7]))
    with pytest.raises(RowStateError, match="row 500 at position 0 was never handed out"):
        a.free(np.array([500]))
    with pytest.raises(RowStateError, match="row -1"):
        a.free(np.array([-1]))
    assert a.stats() == before
    a.free(ids[5:8])  # rows the failed calls named are still in use
    assert a.stats().used == before.used - 3


def test_bound_must_be_whole_slabs():
    with pytest.raises(ValueError, match=f"max_rows=12 must be a positive multiple of the tier's slab_rows={SLAB}"):
        SlabAllocator(CountingTier(), max_rows=12)


def test_full_store_error_names_the_numbers():
    a = SlabAllocator(CountingTier(), max_rows=2 * SLAB)
    a.alloc(10)
    with pytest.raises(StoreFullError, match=r"alloc\(7\): only 6 rows are free under the bound max_rows=16"):
        a.alloc(7)
    assert a.alloc(6).tolist() == list(range(10, 16))


def test_corrupt_state_is_refused():
    a = SlabAllocator(CountingTier())
    a.alloc(10)
    state = a.state_dict()
    state["free_stack"] = np.array([3, 3])
    with pytest.raises(ValueError, match="not distinct rows of"):
        SlabAllocator(CountingTier()).load_state_dict(state)


def test_per_slot_arrays_grow_by_a_quarter_not_a_slab_at_a_time():
    # growing to exactly the capacity at every slab copied them whole each time: quadratic in the rows
    a = np.arange(1, 101, dtype=np.int32)
    b = grown_to(a, 101)
    assert b.shape[0] == 125 and np.array_equal(b[:100], a) and not b[100:].any()
    assert grown_to(b, 120) is b  # room left: no copy
    assert grown_to(b, 1000).shape[0] == 1000  # a jump past a quarter takes what is asked
