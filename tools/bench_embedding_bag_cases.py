"""Benchmark cases of the embedding bag (sum, max and weighted-sum pooling, forward and the backward's sparse row
gradients), with torch's ``embedding_bag`` as the peer where torch imports."""
import numpy as np

import benchlib
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.embedding_bag import embedding_bag, embedding_bag_backward, embedding_bag_max


def _bags(xp, rows, D, B, bag):
    rng = np.random.default_rng(3)
    table, gy, weights = benchlib.arrays(xp, rng, (rows, D), (B, D), (B * bag,))
    slots = rng.zipf(1.2, B * bag) % rows  # skewed, as real feature IDs are: many duplicates
    return table, gy, weights, slots, np.arange(0, B * bag + 1, bag)


def _torch_peers(xp, table, gy, weights, slots_h, offsets_h, B, bag, D):
    """``{case: (fwd, bwd)}`` in torch on the same inputs. The backward is the table's sparse gradient, the same
    result as ours (weighted: of the table only, our weights being data), except for max, which torch refuses
    to give sparse: there it builds the dense ``[rows, D]`` gradient."""
    torch, device = benchlib.peer(xp)
    if torch is None:
        return {}
    F = torch.nn.functional
    tt, tgy = torch.as_tensor(to_host(table), device=device), torch.as_tensor(to_host(gy), device=device)
    tw = torch.as_tensor(to_host(weights), device=device)
    ts, to = torch.as_tensor(slots_h, device=device), torch.as_tensor(offsets_h[:-1], device=device)
    bag_of = torch.arange(B, device=device).repeat_interleave(bag)

    def sum_bwd():  # unique slots and their summed gradients, as ours
        unique, inverse = torch.unique(ts, return_inverse=True)
        return unique, torch.zeros(unique.numel(), D, device=device).index_add_(0, inverse, tgy[bag_of])

    def autograd_peer(mode, w):
        leaf = tt.clone().requires_grad_()
        y = F.embedding_bag(ts, leaf, to, mode=mode, per_sample_weights=w, sparse=mode != "max")
        return (lambda: F.embedding_bag(ts, tt, to, mode=mode, per_sample_weights=w),
                lambda: torch.autograd.grad(y, leaf, tgy, retain_graph=True))

    return {"sum": (lambda: F.embedding_bag(ts, tt, to, mode="sum"), sum_bwd),
            "max": autograd_peer("max", None), "weighted sum": autograd_peer("sum", tw)}


def _bag_cases(xp, rows, D, B, bag):
    table, gy, weights, slots_h, offsets_h = _bags(xp, rows, D, B, bag)
    slots, offsets = xp.asarray(slots_h), xp.asarray(offsets_h)
    argmax = embedding_bag_max(table, slots, offsets)[1]
    N = slots_h.size
    shape = f"rows={rows} D={D} B={B} bag={bag}"
    peers = _torch_peers(xp, table, gy, weights, slots_h, offsets_h, B, bag, D)
    moved = 4 * N * D + 8 * N + 4 * B * D  # rows read, slots, bags written (or the reverse)
    ours = {"sum": (lambda: embedding_bag(table, slots, offsets),
                    lambda: embedding_bag_backward(gy, slots, offsets), 0),
            "max": (lambda: embedding_bag_max(table, slots, offsets),
                    lambda: embedding_bag_backward(gy, slots, offsets, "max", argmax=argmax), 4 * B * D),
            "weighted sum": (lambda: embedding_bag(table, slots, offsets, "sum", weights),
                             lambda: embedding_bag_backward(gy, slots, offsets, "sum", weights), 4 * N)}
    cases = []
    for name, (fwd, bwd, extra) in ours.items():  # extra: max's int32 argmax, or the weights
        fwd_peer, bwd_peer = peers.get(name, (None, None))
        cases += [benchlib.Case(f"embedding_bag {name} fwd", shape, fwd, bytes=moved + extra, torch_run=fwd_peer),
                  benchlib.Case(f"embedding_bag {name} bwd", shape, bwd, bytes=moved + extra, torch_run=bwd_peer)]
    return cases


def cases(xp, quick):
    """Embedding-bag cases on the array module xp; quick: small shapes."""
    if quick:
        return _bag_cases(xp, 10_000, 16, 256, 4)
    return _bag_cases(xp, 200_000, 64, 4096, 20)
