"""Benchmark cases of the interaction ops (dot interaction, DCN-v2's cross, the FM), with torch peers where torch
imports. The gpuemb side calls the kernels' dispatchers (forward then backward), so the tape's bookkeeping is not
timed; the torch side runs its autograd, which is how a torch user gets the same gradients."""
import numpy as np

import benchlib
from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.cross import Cross
from gpuemb.kernels.dot_interaction import dot_interaction, dot_interaction_backward, output_width, pair_count
from gpuemb.kernels.fm import fm, fm_backward


def _dot_case(xp, B, F, D):
    rng = np.random.default_rng(0)
    width, P = output_width(F, D), pair_count(F + 1)
    bottom, emb, gy = benchlib.arrays(xp, rng, (B, D), (B, F, D), (B, width))

    def run():
        dot_interaction(bottom, emb)
        return dot_interaction_backward(gy, bottom, emb)

    torch, device = benchlib.peer(xp)
    torch_run = None
    if torch is not None:
        tb, te = benchlib.leaf(torch, device, bottom), benchlib.leaf(torch, device, emb)
        tgy = torch.as_tensor(to_host(gy)[:, :D + P], device=device)
        li, lj = torch.tril_indices(F + 1, F + 1, -1, device=device)

        def torch_run():
            tb.grad = te.grad = None
            Z = torch.cat([tb[:, None], te], 1)
            torch.cat([tb, torch.bmm(Z, Z.transpose(1, 2))[:, li, lj]], 1).backward(tgy)
            return te.grad

    # forward: a D-long dot per pair; backward: two D-long axpys per pair. Bytes: Z read twice, dZ written, the
    # output written and its gradient read.
    return benchlib.Case("dot_interaction fwd+bwd", f"B={B} F={F} D={D}", run, flops=6 * B * P * D,
                         bytes=4 * (3 * B * (F + 1) * D + 2 * B * width), torch_run=torch_run)


def _cross_case(xp, B, D):
    rng = np.random.default_rng(1)
    x0, xl, W, b, gy = benchlib.arrays(xp, rng, (B, D), (B, D), (D, D), (D,), (B, D))
    W = W / np.float32(np.sqrt(D))
    leaves = [Tensor(a, requires_grad=True) for a in (x0, xl, W, b)]

    def run():
        for t in leaves:
            t.grad = None
        Cross("matrix").apply(*leaves).backward(gy)
        return leaves[0].grad

    torch, device = benchlib.peer(xp)
    torch_run = None
    if torch is not None:
        t0, tl, tW, tb = (benchlib.leaf(torch, device, a) for a in (x0, xl, W, b))
        tgy = torch.as_tensor(to_host(gy), device=device)

        def torch_run():
            for t in (t0, tl, tW, tb):
                t.grad = None
            (t0 * (tl @ tW + tb) + tl).backward(tgy)
            return t0.grad

    # x_l·W forward, then g_h·Wᵀ and x_lᵀ·g_h backward
    return benchlib.Case("cross v2 fwd+bwd", f"B={B} D={D}", run, flops=6 * B * D * D, torch_run=torch_run)


def _fm_case(xp, B, F, D):
    rng = np.random.default_rng(2)
    emb, gy = benchlib.arrays(xp, rng, (B, F, D), (B, 1))

    def run():
        fm(emb)
        return fm_backward(gy, emb)

    torch, device = benchlib.peer(xp)
    torch_run = None
    if torch is not None:
        te, tgy = benchlib.leaf(torch, device, emb), torch.as_tensor(to_host(gy), device=device)

        def torch_run():
            te.grad = None
            (0.5 * (te.sum(1) ** 2 - (te * te).sum(1)).sum(1, keepdim=True)).backward(tgy)
            return te.grad

    # the embeddings read by the forward and by the backward, the gradient written
    return benchlib.Case("fm fwd+bwd", f"B={B} F={F} D={D}", run, bytes=3 * 4 * B * F * D, torch_run=torch_run)


def cases(xp, quick):
    """Dot interaction, cross and FM cases on the array module xp; quick: small shapes."""
    if quick:
        return [_dot_case(xp, 256, 26, 16), _cross_case(xp, 256, 128), _fm_case(xp, 256, 26, 16)]
    return [_dot_case(xp, 2048, 26, 16), _dot_case(xp, 512, 26, 128), _cross_case(xp, 2048, 512),
            _fm_case(xp, 4096, 39, 64)]
