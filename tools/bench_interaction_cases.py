"""Benchmark cases of the interaction ops, the embedding bag and the wire codecs, with torch peers where torch
imports. The gpuemb side calls the kernels' dispatchers (forward then backward), so the tape's bookkeeping is not
timed; the torch side runs its autograd, which is how a torch user gets the same gradients."""
import numpy as np

import benchlib
from gpuemb.autograd import Tensor
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.codecs import bf16_decode, bf16_encode, int8_decode, int8_encode
from gpuemb.kernels.cross import Cross
from gpuemb.kernels.dot_interaction import dot_interaction, dot_interaction_backward, output_width, pair_count
from gpuemb.kernels.embedding_bag import embedding_bag, embedding_bag_backward
from gpuemb.kernels.fm import fm, fm_backward


def _peer(xp):
    """(torch, its device name) where torch imports, else (None, None)."""
    try:
        import torch
    except ImportError:
        return None, None
    return torch, "cpu" if xp.__name__ == "numpy" else "cuda"


def _arrays(xp, rng, *shapes):
    return [xp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]


def _leaf(torch, device, a):
    return torch.as_tensor(to_host(a), device=device).requires_grad_()


def _dot_case(xp, B, F, D):
    rng = np.random.default_rng(0)
    width, P = output_width(F, D), pair_count(F + 1)
    bottom, emb, gy = _arrays(xp, rng, (B, D), (B, F, D), (B, width))

    def run():
        dot_interaction(bottom, emb)
        return dot_interaction_backward(gy, bottom, emb)

    torch, device = _peer(xp)
    torch_run = None
    if torch is not None:
        tb, te = _leaf(torch, device, bottom), _leaf(torch, device, emb)
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
    x0, xl, W, b, gy = _arrays(xp, rng, (B, D), (B, D), (D, D), (D,), (B, D))
    W = W / np.float32(np.sqrt(D))
    leaves = [Tensor(a, requires_grad=True) for a in (x0, xl, W, b)]

    def run():
        for t in leaves:
            t.grad = None
        Cross("matrix").apply(*leaves).backward(gy)
        return leaves[0].grad

    torch, device = _peer(xp)
    torch_run = None
    if torch is not None:
        t0, tl, tW, tb = (_leaf(torch, device, a) for a in (x0, xl, W, b))
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
    emb, gy = _arrays(xp, rng, (B, F, D), (B, 1))

    def run():
        fm(emb)
        return fm_backward(gy, emb)

    torch, device = _peer(xp)
    torch_run = None
    if torch is not None:
        te, tgy = _leaf(torch, device, emb), torch.as_tensor(to_host(gy), device=device)

        def torch_run():
            te.grad = None
            (0.5 * (te.sum(1) ** 2 - (te * te).sum(1)).sum(1, keepdim=True)).backward(tgy)
            return te.grad

    # the embeddings read by the forward and by the backward, the gradient written
    return benchlib.Case("fm fwd+bwd", f"B={B} F={F} D={D}", run, bytes=3 * 4 * B * F * D, torch_run=torch_run)


def _bags(xp, rows, D, B, bag):
    rng = np.random.default_rng(3)
    table, gy = _arrays(xp, rng, (rows, D), (B, D))
    slots = rng.zipf(1.2, B * bag) % rows  # skewed, as real feature IDs are: many duplicates
    return table, gy, slots, np.arange(0, B * bag + 1, bag)


def _bag_cases(xp, rows, D, B, bag):
    table, gy, slots_h, offsets_h = _bags(xp, rows, D, B, bag)
    slots, offsets = xp.asarray(slots_h), xp.asarray(offsets_h)
    N = slots_h.size
    shape = f"rows={rows} D={D} B={B} bag={bag}"
    torch, device = _peer(xp)
    fwd_peer = bwd_peer = None
    if torch is not None:
        F = torch.nn.functional
        tt, tgy = torch.as_tensor(to_host(table), device=device), torch.as_tensor(to_host(gy), device=device)
        ts, to = torch.as_tensor(slots_h, device=device), torch.as_tensor(offsets_h[:-1], device=device)
        bag_of = torch.arange(B, device=device).repeat_interleave(bag)

        def fwd_peer():
            return F.embedding_bag(ts, tt, to, mode="sum")

        def bwd_peer():  # the same sparse result: unique slots and their summed gradients
            unique, inverse = torch.unique(ts, return_inverse=True)
            return unique, torch.zeros(unique.numel(), D, device=device).index_add_(0, inverse, tgy[bag_of])

    return [benchlib.Case("embedding_bag sum fwd", shape, lambda: embedding_bag(table, slots, offsets),
                          bytes=4 * N * D + 8 * N + 4 * B * D, torch_run=fwd_peer),
            benchlib.Case("embedding_bag sum bwd", shape, lambda: embedding_bag_backward(gy, slots, offsets),
                          bytes=4 * N * D + 8 * N + 4 * B * D, torch_run=bwd_peer)]


def _codec_cases(xp, N, D):
    x, = _arrays(xp, np.random.default_rng(4), (N, D))
    torch, device = _peer(xp)
    int8_peer = bf16_peer = None
    if torch is not None:
        tx = torch.as_tensor(to_host(x), device=device)

        def int8_peer():
            scale = tx.abs().amax(1, keepdim=True) / 127
            return torch.round(tx / scale).to(torch.int8).float() * scale

        def bf16_peer():
            return tx.to(torch.bfloat16).float()

    shape = f"N={N} D={D}"
    return [benchlib.Case("int8 encode+decode", shape, lambda: int8_decode(*int8_encode(x)),
                          bytes=N * D * (4 + 1 + 1 + 4) + 8 * N, torch_run=int8_peer),
            benchlib.Case("bf16 encode+decode", shape, lambda: bf16_decode(bf16_encode(x)),
                          bytes=N * D * (4 + 2 + 2 + 4), torch_run=bf16_peer)]


def cases(xp, quick):
    """Dot interaction, cross, FM, embedding bag and codec cases on the array module xp; quick: small shapes."""
    if quick:
        return [_dot_case(xp, 256, 26, 16), _cross_case(xp, 256, 128), _fm_case(xp, 256, 26, 16),
                *_bag_cases(xp, 10_000, 16, 256, 4), *_codec_cases(xp, 1024, 64)]
    return [_dot_case(xp, 2048, 26, 16), _dot_case(xp, 512, 26, 128), _cross_case(xp, 2048, 512),
            _fm_case(xp, 4096, 39, 64), *_bag_cases(xp, 200_000, 64, 4096, 20), *_codec_cases(xp, 65536, 128)]
