import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuemb.autograd import backend

from gpuemb.autograd.backend import to_host
from gpuemb.store import key_index_kernels as K
from gpuemb.store.errors import StoreFullError
from gpuemb.store.key_index import GROWTH, MAX_SLOT, KeyIndex
from gpuemb.store.slab import SlabAllocator
from gpuemb.store.tiers import HostTier, TierSpec

I64 = np.iinfo(np.int64)
# The sentinels, their neighbours, 0 and the extremes: the keys an open-addressing table gets wrong.
AWKWARD = [0, -1, 1, I64.min, I64.min + 1, I64.min + 2, I64.max, I64.max - 1]
# Simulator threads do numpy scalar arithmetic, which warns on the hash's intended uint64 wrap-around.
SIM_WRAP = pytest.mark.filterwarnings("ignore:overflow encountered in scalar multiply:RuntimeWarning")


class Counter:
    """A stand-in for the slab allocator: fresh slots 0, 1, 2, ..."""

    def __init__(self):
        self.next = 0

    def __call__(self, n):
        self.next += n
        return np.arange(self.next - n, self.next)


def insert(index, keys):
    return index.insert_or_find(np.asarray(keys, dtype=np.int64), Counter())


def test_awkward_keys_round_trip():
    assert {int(K.EMPTY), int(K.TOMB)} <= set(AWKWARD)
    index, alloc = KeyIndex(capacity=8), Counter()
    slots, new = index.insert_or_find(np.array(AWKWARD + AWKWARD), alloc)
    np.testing.assert_array_equal(slots, np.tile(np.arange(len(AWKWARD)), 2))
    np.testing.assert_array_equal(new, [True] * len(AWKWARD) + [False] * len(AWKWARD))
    assert len(index) == len(AWKWARD)
    np.testing.assert_array_equal(index.find(np.array(AWKWARD[::-1])), np.arange(len(AWKWARD))[::-1])
    assert (index.find(np.array([2, -2, I64.max - 2, 12345])) == -1).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "find", "erase"]),
                          st.lists(st.one_of(st.sampled_from(AWKWARD), st.integers(-40, 40),
                                             st.integers(I64.min, I64.max)), max_size=40)),
                max_size=25))
def test_matches_a_dict(ops):
    index, alloc, model, next_slot = KeyIndex(capacity=8), Counter(), {}, 0
    for op, keys in ops:
        keys = np.array(keys, dtype=np.int64)
        if op == "insert":
            new = []
            for k in keys.tolist():
                new.append(k not in model)
                if new[-1]:
                    model[k], next_slot = next_slot, next_slot + 1
            slots, is_new = index.insert_or_find(keys, alloc)
            np.testing.assert_array_equal(is_new, new)
            np.testing.assert_array_equal(slots, [model[k] for k in keys.tolist()])
        elif op == "erase":
            expected = [model.pop(k) for k in dict.fromkeys(keys.tolist()) if k in model]
            np.testing.assert_array_equal(index.erase(keys), expected)
        np.testing.assert_array_equal(index.find(keys), [model.get(k, -1) for k in keys.tolist()])
        assert len(index) == len(model)
        assert index.load_factor <= index.max_load
    got = {k: s for ks, ss in index.items(chunk=5) for k, s in zip(ks.tolist(), ss.tolist())}
    assert got == model


def test_two_phase_claim_with_duplicates():
    index = KeyIndex(capacity=8)
    insert(index, [10])
    keys = np.array([7, 10, 7, I64.min, 3, I64.min, 7])
    pos, is_new = index.claim(keys)
    np.testing.assert_array_equal(is_new, [True, False, False, True, True, False, False])
    assert len(set(pos[[0, 2, 6]].tolist())) == 1 and pos[3] == pos[5]
    np.testing.assert_array_equal(index.values_at(pos), [-1, 0, -1, -1, -1, -1, -1])  # new keys: no slot yet
    assert (index.find(keys[is_new]) == -1).all()
    index.assign(pos[is_new], np.array([40, 41, 42]))
    np.testing.assert_array_equal(index.values_at(pos), [40, 0, 40, 41, 42, 41, 40])
    np.testing.assert_array_equal(index.find(keys), index.values_at(pos))
    assert len(index) == 4


def test_unassigned_claim_is_new_again():
    index = KeyIndex(capacity=8)
    index.claim(np.array([5, I64.min]))
    pos, is_new = index.claim(np.array([I64.min, 5, 5]))
    np.testing.assert_array_equal(is_new, [True, True, False])
    assert len(index) == 2


def test_growth_keeps_every_mapping(rng):
    keys = rng.integers(I64.min, I64.max, 1_000_000, dtype=np.int64)
    index, alloc = KeyIndex(), Counter()
    slots = np.concatenate([index.insert_or_find(b, alloc)[0] for b in np.array_split(keys, 40)])
    assert index.load_factor <= index.max_load
    assert len(index) == len(np.unique(keys)) == alloc.next
    np.testing.assert_array_equal(index.find(keys), slots)
    assert len(set(slots.tolist())) == len(index)


def test_one_huge_batch_grows_once_to_fit_its_distinct_keys(rng):
    keys = rng.permutation(np.tile(np.arange(100_000), 3))
    index = KeyIndex(capacity=8)
    slots, new = insert(index, keys)
    _, first = np.unique(keys, return_index=True)
    assert np.flatnonzero(new).tolist() == np.sort(first).tolist()
    np.testing.assert_array_equal(slots[np.sort(first)], np.arange(100_000))
    # Sized for the 100k distinct keys, not the 300k in the batch: room for GROWTH x them before the next rehash.
    assert index.capacity == math.ceil(100_000 * GROWTH / index.max_load)


def test_erase_then_reinsert():
    index = KeyIndex(capacity=8)
    insert(index, np.arange(-50, 50))
    np.testing.assert_array_equal(index.erase(np.array([3, 99, 3, -50, I64.min])), [53, 0])
    assert len(index) == 98
    np.testing.assert_array_equal(index.find(np.array([3, -50, 4])), [-1, -1, 54])
    slots, new = index.insert_or_find(np.array([4, -50, 3]), Counter())
    np.testing.assert_array_equal(slots, [54, 0, 1])
    np.testing.assert_array_equal(new, [False, True, True])


def test_churn_rehashes_in_place():
    """Evicting as fast as inserting fills the table with tombstones; clearing them must not grow it."""
    index, alloc = KeyIndex(capacity=1024), Counter()
    for start in range(0, 20_000, 100):
        index.insert_or_find(np.arange(start, start + 100), alloc)
        if start >= 200:
            index.erase(np.arange(start - 200, start - 100))
    assert index.capacity == 1024 and len(index) == 200
    np.testing.assert_array_equal(index.find(np.arange(19_800, 20_000)), np.arange(19_800, 20_000))
    assert (index.find(np.arange(0, 19_800, 7)) == -1).all()


def test_same_keys_give_same_slots_at_any_capacity(rng):
    batches = [rng.integers(-1000, 1000, 300) for _ in range(10)]
    a, b = Counter(), Counter()
    small, big = KeyIndex(capacity=8), KeyIndex(capacity=1 << 14)
    for keys in batches:
        np.testing.assert_array_equal(small.insert_or_find(keys, a)[0], big.insert_or_find(keys, b)[0])
    assert small.capacity < big.capacity


def test_items_and_nbytes():
    index = KeyIndex(capacity=64)
    insert(index, [I64.min + 1, 5, -5])
    index.claim(np.array([77]))  # claimed, never assigned: no slot to snapshot
    got = sorted(zip(*map(np.ndarray.tolist, map(np.concatenate, zip(*index.items(chunk=7))))))
    assert got == [(I64.min + 1, 0), (-5, 2), (5, 1)]
    assert index.nbytes == (64 + 2) * 12  # int64 key, int32 slot


def test_sentinel_zero_and_negative_keys_survive_growth_and_erase(rng):
    special = np.array([I64.min, I64.min + 1, 0, -1, -7, I64.max, 1])
    index, alloc = KeyIndex(capacity=8), Counter()

    def insert_all(keys):
        return index.insert_or_find(keys, alloc)[0]

    np.testing.assert_array_equal(insert_all(special), np.arange(7))
    bulk = rng.integers(I64.min, I64.max, 30_000)
    bulk_slots = insert_all(bulk)
    assert index.capacity > 30_000 and index.load_factor <= index.max_load  # rehashed many times
    np.testing.assert_array_equal(index.find(special), np.arange(7))
    np.testing.assert_array_equal(index.erase(np.array([I64.min, -1, I64.min + 1])), [0, 3, 1])
    insert_all(rng.integers(I64.min, I64.max, 30_000))  # another rehash, with tombstones to drop
    np.testing.assert_array_equal(index.find(special), [-1, -1, 2, -1, 4, 5, 6])
    np.testing.assert_array_equal(index.find(bulk), bulk_slots)
    np.testing.assert_array_equal(insert_all(np.array([-1, I64.min])), [alloc.next - 2, alloc.next - 1])
    got = dict(zip(*map(np.ndarray.tolist, map(np.concatenate, zip(*index.items())))))
    assert len(got) == len(index) and got[I64.min] == alloc.next - 1 and I64.min + 1 not in got and got[0] == 2


def test_a_slot_outside_int32_is_refused_and_nothing_is_assigned():
    index = KeyIndex(capacity=8)
    pos, _ = index.claim(np.array([5, 6, I64.min]))
    for bad in ([7, 2**31, 8], [7, -4, 8]):
        with pytest.raises(StoreFullError, match=r"slots .* in \[0, 2147483647\].* at most 2\*\*31 rows; shard"):
            index.assign(pos, np.array(bad))
        np.testing.assert_array_equal(index.values_at(pos), [-1, -1, -1])
    index.assign(pos, np.array([0, MAX_SLOT, 9]))
    np.testing.assert_array_equal(index.find(np.array([6, 5, I64.min])), [MAX_SLOT, 0, 9])


def test_index_and_allocator_stay_under_24_bytes_per_key():
    """The budget of ``EmbeddingTable.stats()["index_allocator_bytes_per_key"]`` (the index plus the slab
    allocator's own bytes, over keys) after every batch from 1e3 to 2e6 keys, so right after each growth too."""
    index, alloc = KeyIndex(), SlabAllocator(HostTier(TierSpec(width=1, slab_rows=256, chunk_rows=256)))
    n, growths, worst = 0, 0, 0.0
    while n < 2_000_000:
        fresh = np.arange(n, n + max(1000, n // 16), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        fresh = fresh.view(np.int64)  # distinct (an odd multiplier is a bijection), both signs
        batch = np.concatenate([fresh, fresh[::3], fresh[:n // 100]])  # repeats: a batch must not size for them
        capacity = index.capacity
        index.insert_or_find(batch, alloc.alloc)
        n += fresh.size
        assert len(index) == alloc.n_used == n
        per_key = (index.nbytes + alloc.stats().overhead_bytes) / n
        assert per_key <= 24, f"{per_key:.2f} bytes per key at {n} keys (capacity {index.capacity})"
        growths += index.capacity > capacity
        worst = max(worst, index.nbytes / n)
    assert growths >= 15 and worst > 20  # it was measured right after growing, at the index's worst
    np.testing.assert_array_equal(index.find(fresh), np.arange(n - fresh.size, n))


def test_churn_keeps_the_table_sized_to_its_live_keys():
    """Evicting as fast as inserting, as a bounded level does: each rehash drops the tombstones and sizes the
    table to the live keys, so it neither grows without end nor costs more per key than growing does."""
    index, alloc, bound = KeyIndex(capacity=8), Counter(), 20_000
    for start in range(0, 200_000, 5_000):
        if start >= bound:
            index.erase(np.arange(start - bound, start - bound + 5_000))
        index.insert_or_find(np.arange(start, start + 5_000), alloc)
        assert index.nbytes / len(index) <= 12 * GROWTH / index.max_load + 0.01  # + the two side rows
    assert len(index) == bound
    np.testing.assert_array_equal(index.find(np.arange(180_000, 200_000)), np.arange(180_000, 200_000))


def test_bad_max_load_is_refused():
    with pytest.raises(ValueError, match="max_load=1.0 must lie in"):
        KeyIndex(max_load=1.0)


def _fresh_table(cap):
    """The ``(keys, slots)`` arrays of an empty table, as ``KeyIndex`` lays them out."""
    index = KeyIndex(capacity=cap, xp=np)
    return index.keys, index.slots


@SIM_WRAP
@pytest.mark.cudasim
@pytest.mark.parametrize("cap", [16, 1024])  # 16: 12 distinct keys, so claims collide and probe far
def test_cuda_claim_matches_cpu_with_concurrent_duplicates(rng, cap):
    """Claim and mark against the CPU twin. The simulator runs a block's threads nearly one after another, so
    only a GPU really races the CAS; here the lowest-index-wins marker is what a wrong kernel gets wrong."""
    keys = rng.choice(np.array(AWKWARD + [7, 8, 9, 10]), 600)  # 3 blocks, each key ~50 times a launch
    keys[-1] = 123456789
    cpu, (gpu_keys, gpu_slots) = _fresh_table(cap), _fresh_table(cap)
    n = keys.shape[0]
    pos_c, new_c = np.empty(n, np.int64), np.empty(n, np.bool_)
    pos_g, new_g = np.empty(n, np.int64), np.empty(n, np.bool_)
    assert K.claim_cuda(gpu_keys, gpu_slots, keys, pos_g, new_g) == K.claim_cpu(*cpu, keys, pos_c, new_c) == 11
    np.testing.assert_array_equal(new_g, new_c)
    np.testing.assert_array_equal(gpu_keys[pos_g], keys)  # every key found its own row, side rows included
    gpu_slots[pos_g[new_g]] = np.arange(new_g.sum())
    slots = np.empty(n, np.int64)
    K.lookup_cuda(gpu_keys, gpu_slots, keys, True, slots)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(slots, np.argsort(np.argsort(first))[inverse])  # slots in first-seen order


@SIM_WRAP
@pytest.mark.cudasim
def test_cuda_lookup_of_absent_and_unassigned_keys():
    keys_t, slots_t = _fresh_table(30)
    claimed = np.array([4, I64.min, 4, 5])
    pos, new = np.empty(4, np.int64), np.empty(4, np.bool_)
    K.claim_cuda(keys_t, slots_t, claimed, pos, new)
    slots_t[pos[3]] = 9
    keys = np.array([4, I64.min, 5, 6, I64.min + 1])
    out = np.empty(5, np.int64)
    K.lookup_cuda(keys_t, slots_t, keys, True, out)
    np.testing.assert_array_equal(out, [-1, -1, 9, -1, -1])
    K.lookup_cuda(keys_t, slots_t, keys, False, out)
    np.testing.assert_array_equal(out, [pos[0], 30, pos[3], -1, -1])


@SIM_WRAP
@pytest.mark.cudasim
def test_cuda_rehash_matches_cpu(rng):
    """Live rows move, tombstones and side rows do not, into a table of another (not power-of-two) capacity."""
    index = KeyIndex(capacity=40, xp=np)
    keys = np.concatenate([rng.integers(I64.min, I64.max, 24), [0, -1]])
    index.insert_or_find(keys, Counter())
    index.erase(keys[::4])
    (ck, cs), (gk, gs) = _fresh_table(37), _fresh_table(37)
    K.rehash_cpu(index.keys, index.slots, ck, cs)
    K.rehash_cuda(index.keys, index.slots, gk, gs)
    live = index.keys[index.slots >= 0]
    assert sorted(gk[gs >= 0].tolist()) == sorted(ck[cs >= 0].tolist()) == sorted(live.tolist())
    probe = np.concatenate([keys, rng.integers(I64.min, I64.max, 8)])
    want, got = np.empty(probe.size, np.int64), np.empty(probe.size, np.int64)
    K.lookup_cpu(ck, cs, probe, True, want)
    K.lookup_cuda(gk, gs, probe, True, got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, index.find(probe))


@pytest.mark.real_gpu  # 4M keys: minutes on a GPU's threads, hours in the emulated device's simulator
def test_gpu_index_matches_cpu_on_real_shapes(rng):
    cupy = backend.xp
    # Half the keys from a small pool: thousands of threads race to claim the same key in one launch.
    keys = np.concatenate([rng.integers(-(1 << 40), 1 << 40, 2_000_000), rng.integers(-500, 500, 2_000_000)])
    rng.shuffle(keys)
    cpu, gpu = KeyIndex(), KeyIndex(xp=cupy)
    a, b = Counter(), Counter()
    for batch in np.array_split(keys, 16):
        want_slots, want_new = cpu.insert_or_find(batch, a)
        got_slots, got_new = gpu.insert_or_find(cupy.asarray(batch), lambda n: cupy.asarray(b(n)))
        np.testing.assert_array_equal(to_host(got_slots), want_slots)
        np.testing.assert_array_equal(to_host(got_new), want_new)
    assert len(gpu) == len(cpu)
    np.testing.assert_array_equal(to_host(gpu.erase(cupy.asarray(keys[::3]))), cpu.erase(keys[::3]))
    np.testing.assert_array_equal(to_host(gpu.find(cupy.asarray(keys))), cpu.find(keys))
