"""DCN-v2 with a bottom MLP, MLPerf's DLRM-DCNv2 in small, against TorchRec's own modules (``DenseArch``,
``LowRankCrossNet``, ``OverArch``, the parts of ``torchrec.models.dlrm.DLRM_DCN`` that MLPerf's reference
trains) with the same weights, on fresh random inputs: the logits and every gradient, the embeddings' included.

TorchRec puts the dense part first in x0 and gpuemb last; the reference here follows gpuemb's order, since what
is checked is that the layers compute the same thing, not where the 128 dense columns sit.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.models import build

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec", reason="the reference is TorchRec's DLRM_DCN modules")

B, F, D, N_DENSE = 6, 3, 4, 13
HYPER = {"bottom": (8, 4), "n_cross": 3, "rank": 2, "deep": (10, 6)}  # MLPerf: (512, 256, 128), 3, 512, 1024-...-256


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def reference(model):
    """TorchRec's bottom, cross network and top, holding ``model``'s weights."""
    from torchrec.models.dlrm import DenseArch, OverArch
    from torchrec.modules.crossnet import LowRankCrossNet

    d = F * D + HYPER["bottom"][-1]
    bottom, top = DenseArch(N_DENSE, list(HYPER["bottom"])), OverArch(d, [*HYPER["deep"], 1])
    cross = LowRankCrossNet(d, HYPER["n_cross"], HYPER["rank"])
    with torch.no_grad():
        for ours, theirs in ((model.bottom, bottom), (model.deep, top)):
            assert len(linears(theirs)) == len(ours.layers)
            for mine, lin in zip(ours.layers, linears(theirs)):
                lin.weight.copy_(torch.from_numpy(to_host(mine.weight.data)))
                lin.bias.copy_(torch.from_numpy(to_host(mine.bias.data)))
        for layer, v, w, b in zip(model.cross, cross.V_kernels, cross.W_kernels, cross.bias):
            # x·U·Vᵀ here; TorchRec computes (x·V_kᵀ)·W_kᵀ, so V_k = Uᵀ and W_k = V
            v.copy_(torch.from_numpy(to_host(layer.u.data).T))
            w.copy_(torch.from_numpy(to_host(layer.v.data)))
            b.copy_(torch.from_numpy(to_host(layer.bias.data)) + 0.1)  # not zero, so the bias is seen at work
            layer.bias.data[...] = layer.bias.data + 0.1
    return bottom, cross, top


def test_dcn_with_a_bottom_mlp_is_torchrecs_dlrm_dcn(make_tables, rng):
    model = build("dcn", N_DENSE, make_tables(F, D), seed=5, **HYPER)
    bottom, cross, top = reference(model)
    dense = rng.standard_normal((B, N_DENSE)).astype(np.float32)
    emb = rng.standard_normal((B, F, D)).astype(np.float32)
    upstream = rng.standard_normal(B).astype(np.float32)  # a random cotangent: every gradient is exercised

    emb_t = Tensor(emb.copy(), requires_grad=True)
    logits = model.head(Tensor(dense), emb_t)
    (logits * Tensor(upstream)).sum().backward()

    dense_r, emb_r = torch.from_numpy(dense), torch.from_numpy(emb).requires_grad_()
    x0 = torch.cat([emb_r.reshape(B, -1), bottom(dense_r)], dim=1)
    want = top(cross(x0)).reshape(-1)
    (want * torch.from_numpy(upstream)).sum().backward()

    np.testing.assert_allclose(to_host(logits.data), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_host(emb_t.grad), emb_r.grad.numpy(), rtol=1e-4, atol=1e-5)
    pairs = [(ours, theirs) for mlp, arch in ((model.bottom, bottom), (model.deep, top))
             for ours, theirs in zip(mlp.layers, linears(arch))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(to_host(ours.weight.grad), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(to_host(ours.bias.grad), theirs.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    for layer, v, w, b in zip(model.cross, cross.V_kernels, cross.W_kernels, cross.bias):
        np.testing.assert_allclose(to_host(layer.u.grad), v.grad.numpy().T, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(to_host(layer.v.grad), w.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(to_host(layer.bias.grad), b.grad.numpy(), rtol=1e-4, atol=1e-5)
