import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.dot_interaction import (
    DotInteraction, dot_interaction, dot_interaction_backward, dot_interaction_backward_cpu,
    dot_interaction_backward_cuda, dot_interaction_backward_ref, dot_interaction_cpu, dot_interaction_cuda,
    dot_interaction_ref, output_width, pair_count)

# B, F, D: B = 1, F + 1 not a multiple of 16, D not a multiple of 32, and the two benchmark-like sizes
SHAPES = [(1, 1, 1), (3, 4, 5), (17, 26, 16), (5, 15, 37), (4, 26, 128), (2, 40, 3)]


def _inputs(rng, B, F, D, dtype=np.float32):
    return (rng.standard_normal((B, D)).astype(dtype), rng.standard_normal((B, F, D)).astype(dtype))


def test_reference_follows_torch_tril_order():
    # Z rows: bottom [1, 1], e1 [2, 0], e2 [0, 3] -> pairs (1,0)=2, (2,0)=3, (2,1)=0 in tril_indices order
    bottom, emb = np.array([[1.0, 1.0]]), np.array([[[2.0, 0.0], [0.0, 3.0]]])
    np.testing.assert_array_equal(dot_interaction_ref(bottom, emb, pad_to=1), [[1, 1, 2, 3, 0]])
    np.testing.assert_array_equal(dot_interaction_ref(bottom, emb, self_interaction=True, pad_to=5),
                                  [[1, 1, 2, 2, 4, 3, 0, 9, 0, 0]])


@pytest.mark.parametrize("F,D,diag,pad,width", [(26, 16, False, 8, 368), (26, 16, False, 1, 367),
                                                (26, 128, True, 8, 512), (1, 1, False, 8, 8)])
def test_output_width(F, D, diag, pad, width):
    assert output_width(F, D, diag, pad) == width


@pytest.mark.parametrize("B,F,D", SHAPES)
@pytest.mark.parametrize("diag", [False, True])
def test_cpu_forward_matches_reference(rng, B, F, D, diag):
    bottom, emb = _inputs(rng, B, F, D)
    got = dot_interaction_cpu(bottom, emb, diag)
    np.testing.assert_allclose(got, dot_interaction_ref(bottom, emb, diag), rtol=1e-5, atol=1e-4 * np.sqrt(D))
    assert np.all(got[:, D + pair_count(F + 1, diag):] == 0)


@pytest.mark.parametrize("B,F,D", SHAPES)
@pytest.mark.parametrize("diag", [False, True])
def test_cpu_backward_matches_reference(rng, B, F, D, diag):
    bottom, emb = _inputs(rng, B, F, D)
    gy = rng.standard_normal((B, output_width(F, D, diag))).astype(np.float32)
    for got, want in zip(dot_interaction_backward_cpu(gy, bottom, emb, diag),
                         dot_interaction_backward_ref(gy, bottom, emb, diag)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(D * F))


def test_non_contiguous_inputs(rng):
    bottom, emb = _inputs(rng, 6, 5, 8)
    emb_t = np.ascontiguousarray(emb.transpose(0, 2, 1)).transpose(0, 2, 1)
    np.testing.assert_allclose(dot_interaction(bottom[::1], emb_t), dot_interaction_ref(bottom, emb), rtol=1e-5,
                               atol=1e-5)


def test_mismatched_shapes_are_refused(rng):
    bottom, emb = _inputs(rng, 2, 3, 4)
    with pytest.raises(ValueError, match=r"bottom \[B, D\] and embeddings \[B, F, D\]"):
        dot_interaction(bottom[:, :3], emb)
    with pytest.raises(ValueError, match="narrower than the output"):
        dot_interaction_backward(np.ones((2, 4 + 5), np.float32), bottom, emb)


@pytest.mark.parametrize("diag,pad", [(False, 8), (True, 1)])
def test_function_gradcheck(rng, diag, pad):
    bottom, emb = _inputs(rng, 3, 4, 5, np.float64)
    assert gradcheck(lambda b, e: DotInteraction(diag, pad).apply(b, e), bottom, emb)


def test_function_matches_torch(rng):
    torch = pytest.importorskip("torch")
    B, F, D = 4, 6, 8
    bottom, emb = _inputs(rng, B, F, D, np.float64)
    gy = rng.standard_normal((B, output_width(F, D)))
    tb, te = torch.tensor(bottom, requires_grad=True), torch.tensor(emb, requires_grad=True)
    Z = torch.cat([tb[:, None], te], 1)
    li, lj = torch.tril_indices(F + 1, F + 1, -1)
    ty = torch.cat([tb, torch.bmm(Z, Z.transpose(1, 2))[:, li, lj]], 1)
    ty = torch.nn.functional.pad(ty, (0, output_width(F, D) - ty.shape[1]))
    ty.backward(torch.tensor(gy))
    b, e = Tensor(bottom, requires_grad=True), Tensor(emb, requires_grad=True)
    y = DotInteraction().apply(b, e)
    y.backward(gy)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(e.grad, te.grad.numpy(), rtol=1e-12)


def test_dispatch_on_each_backend(xp, rng):
    bottom, emb = _inputs(rng, 5, 7, 12)
    gy = rng.standard_normal((5, output_width(7, 12))).astype(np.float32)
    y = dot_interaction(xp.asarray(bottom), xp.asarray(emb))
    assert type(y) is type(xp.asarray(bottom))
    np.testing.assert_allclose(to_host(y), dot_interaction_ref(bottom, emb), rtol=1e-5, atol=1e-5)
    g = dot_interaction_backward(xp.asarray(gy), xp.asarray(bottom), xp.asarray(emb))
    for got, want in zip(g, dot_interaction_backward_ref(gy, bottom, emb)):
        np.testing.assert_allclose(to_host(got), want, rtol=1e-5, atol=1e-4)


# D = 40 and 3 cross the 32-column tile boundary or stay under it; F + 1 = 5 and 12 are not multiples of 16
@pytest.mark.cudasim
@pytest.mark.parametrize("B,F,D,diag", [(1, 1, 1, False), (2, 4, 40, False), (2, 11, 3, True)])
def test_cuda_kernels_match_reference(rng, B, F, D, diag):
    bottom, emb = _inputs(rng, B, F, D)
    gy = rng.standard_normal((B, output_width(F, D, diag))).astype(np.float32)
    np.testing.assert_allclose(dot_interaction_cuda(bottom, emb, diag), dot_interaction_ref(bottom, emb, diag),
                               rtol=1e-5, atol=1e-4)
    for got, want in zip(dot_interaction_backward_cuda(gy, bottom, emb, diag),
                         dot_interaction_backward_ref(gy, bottom, emb, diag)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.cudasim
def test_cuda_half_variant_sums_in_float32(rng):
    """Mixed precision: float16 in and out, each dot summed in float32 (D = 40 takes two tiles)."""
    B, F, D = 8, 4, 40
    bottom, emb = _inputs(rng, B, F, D, np.float16)
    gy = rng.standard_normal((B, output_width(F, D))).astype(np.float16)
    b32, e32, g32 = bottom.astype(np.float32), emb.astype(np.float32), gy.astype(np.float32)
    y = dot_interaction_cuda(bottom, emb)
    assert y.dtype == np.float16
    want, tile = dot_interaction_ref(b32, e32), dot_interaction_ref(b32[:, :32], e32[:, :, :32])[:, 32:]
    # Rounded to float16 twice (after the first tile, then at the end): within half an ulp of each, where
    # float16 sums would drift by several ulps.
    bound = 2.0 ** -11 * (np.abs(tile) + np.abs(want[:, D:])) + 1e-6
    assert (np.abs(y[:, D:].astype(np.float32) - want[:, D:]) <= bound).all()
    np.testing.assert_array_equal(y[:, :D], bottom)
    for got, want in zip(dot_interaction_backward_cuda(gy, bottom, emb), dot_interaction_backward_ref(g32, b32, e32)):
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=4e-3, atol=4e-3 * np.abs(want).max())


@pytest.mark.parametrize("forward,backward", [
    (dot_interaction_cpu, dot_interaction_backward_cpu),
    pytest.param(dot_interaction_cuda, dot_interaction_backward_cuda, marks=pytest.mark.cudasim)], ids=["cpu", "cuda"])
@pytest.mark.parametrize("diag", [False, True])
def test_empty_batch(rng, forward, backward, diag):
    """B = 0: empty outputs of the reference's shapes (the CUDA kernels, a block per sample, launch nothing)."""
    F, D = 4, 5
    bottom, emb = _inputs(rng, 0, F, D)
    gy = rng.standard_normal((0, output_width(F, D, diag))).astype(np.float32)
    y, want = forward(bottom, emb, diag), dot_interaction_ref(bottom, emb, diag)
    assert y.shape == want.shape == (0, output_width(F, D, diag)) and y.dtype == np.float32
    for got, want in zip(backward(gy, bottom, emb, diag), dot_interaction_backward_ref(gy, bottom, emb, diag)):
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
@pytest.mark.parametrize("B,F,D", [(2048, 26, 16), (512, 26, 128), (64, 127, 256)])
def test_cuda_kernels_on_real_shapes(rng, B, F, D):
    bottom, emb = _inputs(rng, B, F, D)
    gy = rng.standard_normal((B, output_width(F, D))).astype(np.float32)
    y = dot_interaction_cuda(to_device(bottom), to_device(emb))
    np.testing.assert_allclose(to_host(y), dot_interaction_ref(bottom, emb), rtol=1e-4, atol=1e-3 * np.sqrt(D))
    g = dot_interaction_backward_cuda(to_device(gy), to_device(bottom), to_device(emb))
    for got, want in zip(g, dot_interaction_backward_ref(gy, bottom, emb)):
        np.testing.assert_allclose(to_host(got), want, rtol=1e-4, atol=1e-3 * np.sqrt(D * F))
