import numpy as np
import pytest

from gpuemb.autograd import Tensor, numerical_grad
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.embedding_bag import (
    EmbeddingBagFunction, embedding_bag, embedding_bag_backward, embedding_bag_backward_cpu,
    embedding_bag_backward_cuda, embedding_bag_backward_ref, embedding_bag_cpu, embedding_bag_cuda,
    embedding_bag_max, embedding_bag_max_cpu, embedding_bag_max_cuda, embedding_bag_max_ref, embedding_bag_ref,
    embedding_bag_weight_grad, embedding_bag_weight_grad_cpu, embedding_bag_weight_grad_cuda,
    embedding_bag_weight_grad_ref)

# rows, D, B, max bag size: B = 1, D not a multiple of 32, bags of 0 to 7 slots
SHAPES = [(1, 1, 1, 1), (10, 5, 7, 3), (50, 37, 33, 7), (1000, 128, 64, 4)]


def _bags(rng, rows, D, B, max_bag, dtype=np.float32):
    table = rng.standard_normal((rows, D)).astype(dtype)
    sizes = rng.integers(0 if B > 1 else 1, max_bag + 1, B)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return table, rng.integers(0, rows, offsets[-1]), offsets


def _dense(unique, summed, rows):
    g = np.zeros((rows, summed.shape[1]), dtype=summed.dtype)
    g[to_host(unique)] = to_host(summed)
    return g


def test_reference_pools_by_hand():
    table = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    slots, offsets = np.array([0, 2, 1, 1]), np.array([0, 2, 2, 4])
    np.testing.assert_array_equal(embedding_bag_ref(table, slots, offsets, "sum"), [[6, 8], [0, 0], [6, 8]])
    np.testing.assert_array_equal(embedding_bag_ref(table, slots, offsets, "mean"), [[3, 4], [0, 0], [3, 4]])
    unique, summed = embedding_bag_backward_ref(np.array([[1.0, 1.0], [7.0, 7.0], [2.0, 4.0]]), slots, offsets)
    np.testing.assert_array_equal(unique, [0, 1, 2])
    np.testing.assert_array_equal(summed, [[1, 1], [4, 8], [1, 1]])


@pytest.mark.parametrize("rows,D,B,max_bag", SHAPES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_cpu_forward_matches_reference(rng, rows, D, B, max_bag, mode):
    table, slots, offsets = _bags(rng, rows, D, B, max_bag)
    np.testing.assert_allclose(embedding_bag_cpu(table, slots, offsets, mode),
                               embedding_bag_ref(table, slots, offsets, mode), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(embedding_bag_cpu(table, slots), embedding_bag_ref(table, slots))


@pytest.mark.parametrize("rows,D,B,max_bag", SHAPES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_cpu_backward_matches_reference(rng, rows, D, B, max_bag, mode):
    table, slots, offsets = _bags(rng, rows, D, B, max_bag)
    gy = rng.standard_normal((B, D)).astype(np.float32)
    unique, summed = embedding_bag_backward_cpu(gy, slots, offsets, mode)
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets, mode)
    np.testing.assert_array_equal(unique, want_unique)
    np.testing.assert_array_equal(summed, want_summed)  # both add each slot's gradients in index order


def test_backward_without_pooling(rng):
    slots = rng.integers(0, 6, 40)
    gy = rng.standard_normal((40, 3))
    unique, summed = embedding_bag_backward(gy, slots)
    np.testing.assert_array_equal(unique, np.unique(slots))
    np.testing.assert_allclose(summed, [gy[slots == s].sum(axis=0) for s in unique], rtol=1e-12)


@pytest.mark.parametrize("pooling", ["mean", "max", "weighted"])
@pytest.mark.parametrize("hot", [False, True])
def test_backward_is_deterministic(rng, hot, pooling):
    # many duplicates: 200k slots drawn from 50 rows, or nearly all of them one hot slot
    slots = rng.integers(0, 50, 200_000)
    if hot:
        slots[rng.random(slots.size) < 0.95] = 7
    offsets = np.arange(0, slots.size + 1, 8)
    gy = rng.standard_normal((offsets.size - 1, 64)).astype(np.float32)
    mode = "sum" if pooling == "weighted" else pooling
    weights = rng.standard_normal(slots.size).astype(np.float32) if pooling == "weighted" else None
    argmax = embedding_bag_max(rng.standard_normal((50, 64)), slots, offsets)[1] if pooling == "max" else None
    first = embedding_bag_backward(gy, slots, offsets, mode, weights, argmax)
    second = embedding_bag_backward(gy.copy(), slots.copy(), offsets.copy(), mode,
                                    None if weights is None else weights.copy(),
                                    None if argmax is None else argmax.copy())
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert first[1].view(np.uint32).tobytes() == second[1].view(np.uint32).tobytes()


def test_bad_offsets_and_slots_are_refused(rng):
    table, slots, offsets = _bags(rng, 5, 2, 3, 2)
    with pytest.raises(ValueError, match="from 0 to len"):
        embedding_bag(table, slots, offsets + 1)
    with pytest.raises(ValueError, match="must not decrease"):
        embedding_bag(table, np.zeros(4, np.int64), np.array([0, 3, 1, 4]))
    with pytest.raises(IndexError, match="outside the table's 5 rows"):
        embedding_bag(table, np.array([0, 5]), np.array([0, 2]))
    with pytest.raises(ValueError, match="mode='median'; use one of sum, mean, max"):
        embedding_bag(table, slots, offsets, "median")
    with pytest.raises(ValueError, match="one row per bag"):
        embedding_bag_backward(np.ones((4, 2), np.float32), slots, offsets)


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("mean", False), ("max", False), ("sum", True)])
def test_function_hands_row_grads_to_callback(rng, mode, weighted):
    table, slots, offsets = _bags(rng, 6, 3, 4, 3, np.float64)
    weights = rng.standard_normal(slots.size) if weighted else None
    received = []
    t = Tensor(table.copy(), requires_grad=True)
    y = EmbeddingBagFunction(slots, offsets, mode, lambda u, g: received.append((u, g)), weights).apply(t)
    upstream = rng.standard_normal(y.shape)
    y.backward(upstream)
    assert t.grad is None and len(received) == 1
    unique, summed = received[0]
    assert summed.shape == (np.unique(slots).size, 3)
    f = lambda tab: EmbeddingBagFunction(slots, offsets, mode, print, weights).apply(tab)  # noqa: E731
    numeric, = numerical_grad(f, [Tensor(table.copy())], upstream)
    np.testing.assert_allclose(_dense(unique, summed, 6), numeric, atol=1e-7)


def test_function_matches_torch(rng):
    torch = pytest.importorskip("torch")
    table, slots, offsets = _bags(rng, 20, 6, 9, 5, np.float64)
    gy = rng.standard_normal((9, 6))
    tt = torch.tensor(table, requires_grad=True)
    ty = torch.nn.functional.embedding_bag(torch.tensor(slots), tt, torch.tensor(offsets), mode="mean",
                                           include_last_offset=True)
    ty.backward(torch.tensor(gy))
    received = []
    y = EmbeddingBagFunction(slots, offsets, "mean", on_grad=lambda u, g: received.append(_dense(u, g, 20))).apply(
        Tensor(table, requires_grad=True))
    y.backward(gy)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(received[0], tt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_function_needs_a_callback():
    with pytest.raises(TypeError, match="on_grad must be a callable"):
        EmbeddingBagFunction(np.array([0]))


def test_dispatch_on_each_backend(xp, rng):
    table, slots, offsets = _bags(rng, 30, 12, 16, 4)
    gy = rng.standard_normal((16, 12)).astype(np.float32)
    y = embedding_bag(xp.asarray(table), xp.asarray(slots), xp.asarray(offsets))
    assert type(y) is type(xp.asarray(table))
    np.testing.assert_allclose(to_host(y), embedding_bag_ref(table, slots, offsets), rtol=1e-5, atol=1e-6)
    unique, summed = embedding_bag_backward(xp.asarray(gy), xp.asarray(slots), xp.asarray(offsets))
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets)
    np.testing.assert_array_equal(to_host(unique), want_unique)
    np.testing.assert_allclose(to_host(summed), want_summed, rtol=1e-6, atol=1e-6)


@pytest.mark.cudasim
@pytest.mark.parametrize("rows,D,B,max_bag", [(1, 1, 1, 1), (9, 5, 6, 4), (4, 33, 3, 6)])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_cuda_kernels_match_reference(rng, rows, D, B, max_bag, mode):
    table, slots, offsets = _bags(rng, rows, D, B, max_bag)
    gy = rng.standard_normal((B, D)).astype(np.float32)
    np.testing.assert_allclose(embedding_bag_cuda(table, slots, offsets, mode),
                               embedding_bag_ref(table, slots, offsets, mode), rtol=1e-5, atol=1e-6)
    unique, summed = embedding_bag_backward_cuda(gy, slots, offsets, mode)
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets, mode)
    np.testing.assert_array_equal(unique, want_unique)
    np.testing.assert_array_equal(summed, want_summed)


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_cuda_kernels_on_real_shapes(rng, mode):
    table, slots, offsets = _bags(rng, 100_000, 128, 4096, 20)
    slots[::3] = 5  # one hot slot: a long run
    gy = rng.standard_normal((4096, 128)).astype(np.float32)
    d_slots, d_offsets = to_device(slots), to_device(offsets)
    y = embedding_bag_cuda(to_device(table), d_slots, d_offsets, mode)
    np.testing.assert_allclose(to_host(y), embedding_bag_ref(table, slots, offsets, mode), rtol=1e-4, atol=1e-5)
    first = embedding_bag_backward_cuda(to_device(gy), d_slots, d_offsets, mode)
    second = embedding_bag_backward_cuda(to_device(gy), d_slots, d_offsets, mode)
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets, mode)
    np.testing.assert_array_equal(to_host(first[0]), want_unique)
    np.testing.assert_allclose(to_host(first[1]), want_summed, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(to_host(first[1]), to_host(second[1]))


@pytest.mark.parametrize("spread", [30, 10 ** 9], ids=["counting-sort", "comparison-sort"])
@pytest.mark.parametrize("pooled", [False, True])
def test_cpu_backward_sums_in_the_order_of_a_stable_sort(rng, spread, pooled):
    # slots within a few times the batch take the counting sort, wide ones the comparison sort: both must add
    # each slot's gradients in the same order as the stable argsort, so the sums agree bit for bit
    from gpuemb.kernels.embedding_bag import _runs, _segment_rows_cpu
    slots = rng.integers(0, spread, 300)
    slots[rng.random(300) < 0.3] = slots[0]  # duplicates, wherever the values lie
    offsets = np.arange(0, 301, 3) if pooled else None
    gy = rng.standard_normal((100 if pooled else 300, 8)).astype(np.float32)
    unique, summed = embedding_bag_backward_cpu(gy, slots, offsets)
    bounds_of = offsets if pooled else np.arange(301)
    u, bag, bounds, _ = _runs(slots, bounds_of, 300)
    want = _segment_rows_cpu(gy, bag, np.empty(0, np.float32), bounds, False, np.empty((u.size, 8), np.float32))
    np.testing.assert_array_equal(unique, u)
    assert summed.tobytes() == want.tobytes()
    np.testing.assert_allclose(summed, [gy[(np.arange(300) // 3 if pooled else np.arange(300))[slots == s]].sum(0)
                                        for s in u], rtol=1e-5, atol=1e-5)


# -- max pooling and weighted sums ---------------------------------------------------------------------------------
# more shapes: a table of 3 rows with bags of up to 6, so slots repeat within and across bags
POOL_SHAPES = SHAPES + [(3, 4, 12, 6)]


def test_max_and_weighted_reference_by_hand():
    # bag 0: column 0's max 3 is in slots 1 and 2 (the first, position 1, wins), column 1's 5 in slots 0 and 1
    table = np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 0.0]])
    slots, offsets = np.array([0, 1, 2, 1, 1]), np.array([0, 3, 3, 5])
    gy = np.array([[1.0, 2.0], [7.0, 7.0], [10.0, 20.0]])
    out, argmax = embedding_bag_max_ref(table, slots, offsets)
    np.testing.assert_array_equal(out, [[3, 5], [0, 0], [3, 5]])
    np.testing.assert_array_equal(argmax, [[1, 0], [-1, -1], [3, 3]])
    unique, summed = embedding_bag_backward_ref(gy, slots, offsets, "max", argmax=argmax)
    np.testing.assert_array_equal(unique, [0, 1, 2])
    np.testing.assert_array_equal(summed, [[0, 2], [11, 20], [0, 0]])
    weights = np.array([0.5, 2.0, -1.0, 1.0, 3.0])
    np.testing.assert_array_equal(embedding_bag_ref(table, slots, offsets, "sum", weights),
                                  [[3.5, 12.5], [0, 0], [12, 20]])
    _, summed = embedding_bag_backward_ref(gy, slots, offsets, "sum", weights)
    np.testing.assert_array_equal(summed, [[0.5, 1], [42, 84], [-1, -2]])
    np.testing.assert_array_equal(embedding_bag_weight_grad_ref(table, slots, offsets, gy), [11, 13, 3, 130, 130])


def _check_max(rng, shape, ties, pool, backward):
    table, slots, offsets = _bags(rng, *shape)
    if ties:  # five values only: rows of different slots tie often, and the first position must win
        table = rng.integers(-2, 3, table.shape).astype(np.float32)
    gy = rng.standard_normal((shape[2], shape[1])).astype(np.float32)
    out, argmax = pool(table, slots, offsets)
    want, want_argmax = embedding_bag_max_ref(table, slots, offsets)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(argmax, want_argmax)
    assert argmax.dtype == np.int32
    unique, summed = backward(gy, slots, offsets, "max", argmax=argmax)
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets, "max", argmax=want_argmax)
    np.testing.assert_array_equal(unique, want_unique)
    np.testing.assert_array_equal(summed, want_summed)  # both add the routed gradients in index order


def _check_weighted(rng, shape, forward, backward, weight_grad):
    table, slots, offsets = _bags(rng, *shape)
    weights = rng.standard_normal(slots.size).astype(np.float32)
    gy = rng.standard_normal((shape[2], shape[1])).astype(np.float32)
    np.testing.assert_allclose(forward(table, slots, offsets, "sum", weights),
                               embedding_bag_ref(table, slots, offsets, "sum", weights), rtol=1e-5, atol=1e-5)
    unique, summed = backward(gy, slots, offsets, "sum", weights)
    want_unique, want_summed = embedding_bag_backward_ref(gy, slots, offsets, "sum", weights)
    np.testing.assert_array_equal(unique, want_unique)
    np.testing.assert_array_equal(summed, want_summed)
    np.testing.assert_allclose(weight_grad(table, slots, offsets, gy),
                               embedding_bag_weight_grad_ref(table, slots, offsets, gy), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape", POOL_SHAPES)
def test_cpu_max_matches_reference(rng, shape, ties):
    _check_max(rng, shape, ties, embedding_bag_max_cpu, embedding_bag_backward_cpu)


@pytest.mark.parametrize("shape", POOL_SHAPES)
def test_cpu_weighted_sum_matches_reference(rng, shape):
    _check_weighted(rng, shape, embedding_bag_cpu, embedding_bag_backward_cpu, embedding_bag_weight_grad_cpu)


@pytest.mark.cudasim
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (9, 5, 6, 4), (3, 33, 4, 6)])
def test_cuda_max_matches_reference(rng, shape, ties):
    _check_max(rng, shape, ties, embedding_bag_max_cuda, embedding_bag_backward_cuda)


@pytest.mark.cudasim
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (9, 5, 6, 4), (3, 33, 4, 6)])
def test_cuda_weighted_sum_matches_reference(rng, shape):
    _check_weighted(rng, shape, embedding_bag_cuda, embedding_bag_backward_cuda, embedding_bag_weight_grad_cuda)


def test_max_and_weighted_sum_match_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    table, slots, offsets = _bags(rng, 20, 6, 9, 5, np.float64)
    weights, gy = rng.standard_normal(slots.size), rng.standard_normal((9, 6))
    assert (np.diff(offsets) == 0).any()  # an empty bag: zeros in both
    for mode, w in [("max", None), ("sum", weights)]:
        tt = torch.tensor(table, requires_grad=True)
        tw = None if w is None else torch.tensor(w, requires_grad=True)
        ty = F.embedding_bag(torch.tensor(slots), tt, torch.tensor(offsets), mode=mode, per_sample_weights=tw,
                             include_last_offset=True)
        ty.backward(torch.tensor(gy))
        received = []
        y = EmbeddingBagFunction(slots, offsets, mode, lambda u, g: received.append(_dense(u, g, 20)), w).apply(
            Tensor(table, requires_grad=True))
        y.backward(gy)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(received[0], tt.grad.numpy(), rtol=1e-12, atol=1e-15)
        if tw is not None:
            np.testing.assert_allclose(embedding_bag_weight_grad(table, slots, offsets, gy), tw.grad.numpy(),
                                       rtol=1e-12)


def test_max_and_weights_misuse_is_refused(rng):
    table, slots, offsets = _bags(rng, 5, 2, 3, 2)
    weights = rng.standard_normal(slots.size).astype(np.float32)
    for mode in ("mean", "max"):
        with pytest.raises(ValueError, match=f"need offsets \\[B\\+1\\] and mode='sum'.*got mode='{mode}'$"):
            embedding_bag(table, slots, offsets, mode, weights)
    with pytest.raises(ValueError, match="without offsets"):
        embedding_bag(table, slots, None, "sum", weights)
    with pytest.raises(ValueError, match=f"weights of shape \\({slots.size - 1},\\); want \\[{slots.size}\\]"):
        embedding_bag(table, slots, offsets, "sum", weights[:-1])
    with pytest.raises(ValueError, match="a pooled max, and only it, takes the argmax"):
        embedding_bag_backward(np.ones((3, 2), np.float32), slots, offsets, "max")
    with pytest.raises(ValueError, match="max pooling needs bags"):
        embedding_bag_max(table, slots, None)
