"""What every level of the store shares: the eviction policy."""
import numpy as np

from gpuemb.store.level import EvictionPolicy


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
