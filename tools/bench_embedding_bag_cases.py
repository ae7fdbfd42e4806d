"""Benchmark cases of the embedding bag (sum pooling, forward and the backward's sparse row gradients), with torch's
``embedding_bag`` as the peer where torch imports."""
import numpy as np

import benchlib
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.embedding_bag import embedding_bag, embedding_bag_backward


def _bags(xp, rows, D, B, bag):
    rng = np.random.default_rng(3)
    table, gy = benchlib.arrays(xp, rng, (rows, D), (B, D))
    slots = rng.zipf(1.2, B * bag) % rows  # skewed, as real feature IDs are: many duplicates
    return table, gy, slots, np.arange(0, B * bag + 1, bag)


def _bag_cases(xp, rows, D, B, bag):
    table, gy, slots_h, offsets_h = _bags(xp, rows, D, B, bag)
    slots, offsets = xp.asarray(slots_h), xp.asarray(offsets_h)
    N = slots_h.size
    shape = f"rows={rows} D={D} B={B} bag={bag}"
    torch, device = benchlib.peer(xp)
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


def cases(xp, quick):
    """Embedding-bag cases on the array module xp; quick: small shapes."""
    if quick:
        return _bag_cases(xp, 10_000, 16, 256, 4)
    return _bag_cases(xp, 200_000, 64, 4096, 20)
