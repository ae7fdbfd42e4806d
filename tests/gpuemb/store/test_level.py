"""What every level of the store shares: the eviction policy and the per-slot arrays that follow the tier."""
import numpy as np

from gpuemb.store.level import EvictionPolicy, _fit


def test_policy_evicts_least_recent_or_least_frequent():
    for kind, want in (("lru", [0, 1]), ("lfu", [2, 3])):
        p = EvictionPolicy(kind)
        p.grow(6)
        p.insert(np.arange(6))
        p.touch(np.arange(6))
        p.touch(np.array([0, 1]))
        p.touch(np.array([0, 1]))  # 0, 1: used most, longest ago
        p.touch(np.array([2, 3]))
        p.touch(np.array([4, 5]))
        p.pin(np.array([5]))
        assert sorted(p.victims(2).tolist()) == want
        assert p.victims(6) is None  # one is pinned


def test_per_slot_arrays_grow_by_a_quarter_not_a_slab_at_a_time():
    # growing to exactly the capacity at every slab copied them whole each time: quadratic in the rows
    a = np.arange(1, 101, dtype=np.int32)
    b = _fit(a, 101)
    assert b.shape[0] == 125 and np.array_equal(b[:100], a) and not b[100:].any()
    assert _fit(b, 120) is b  # room left: no copy
    assert _fit(b, 1000).shape[0] == 1000  # a jump past a quarter takes what is asked
