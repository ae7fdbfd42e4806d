"""Benchmark cases of the fused ReLU-dropout and the fused MLP, with torch peers where torch imports."""
import numpy as np

import benchlib
from gpuemb.autograd import Tensor
from gpuemb.kernels.mlp import FusedLayer, FusedMLP
from gpuemb.kernels.relu_dropout import relu_dropout, relu_dropout_backward

P = 0.5


def _relu_dropout_case(xp, B, H):
    rng = np.random.default_rng(0)
    x, gy = benchlib.arrays(xp, rng, (B, H), (B, H))

    def run():
        y, mask = relu_dropout(x, P, seed=1, step=2)
        return relu_dropout_backward(gy, mask, 1 / (1 - P))

    torch, device = benchlib.peer(xp)
    torch_run = None
    if torch is not None:
        tx = torch.as_tensor(np.asarray(rng.standard_normal((B, H), dtype=np.float32)), device=device)
        tgy = torch.ones_like(tx)

        def torch_run():
            t = tx.detach().requires_grad_()
            torch.nn.functional.dropout(torch.relu(t), P, training=True).backward(tgy)
            return t.grad

    n = B * H
    # forward reads x, writes y and the 1-bit mask; backward reads gy and the mask, writes gx
    return benchlib.Case("relu_dropout fwd+bwd", f"B={B} H={H} p={P}", run, bytes=16 * n + 2 * n // 8,
                         torch_run=torch_run)


def _mlp_case(xp, B, sizes):
    rng = np.random.default_rng(1)
    x = Tensor(xp.asarray(rng.standard_normal((B, sizes[0]), dtype=np.float32)), requires_grad=True)
    params = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        params += [Tensor(xp.asarray(rng.standard_normal((n_out, n_in), dtype=np.float32) / np.float32(np.sqrt(n_in))),
                          requires_grad=True),
                   Tensor(xp.asarray(rng.standard_normal(n_out, dtype=np.float32)), requires_grad=True)]
    layers = [FusedLayer(True, P, seed=i) for i in range(len(sizes) - 1)]
    gy = xp.ones((B, sizes[-1]), dtype=np.float32)

    def run():
        for t in (x, *params):
            t.grad = None
        FusedMLP(layers, step=3).apply(x, *params).backward(gy)
        return x.grad

    torch, device = benchlib.peer(xp)
    torch_run = None
    if torch is not None:
        net = torch.nn.Sequential(*[m for a, b in zip(sizes, sizes[1:])
                                    for m in (torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Dropout(P))]).to(device)
        tx = torch.as_tensor(np.asarray(rng.standard_normal((B, sizes[0]), dtype=np.float32)), device=device)
        tgy = torch.ones((B, sizes[-1]), device=device)

        def torch_run():
            net.zero_grad(set_to_none=True)
            t = tx.detach().requires_grad_()
            net(t).backward(tgy)
            return t.grad

    # forward x @ W.T, backward g.T @ x and g @ W: three matmuls of 2 * B * in * out each
    flops = sum(6 * B * a * b for a, b in zip(sizes, sizes[1:]))
    shape = f"B={B} " + "->".join(map(str, sizes)) + f" relu+dropout p={P}"
    return benchlib.Case("fused MLP fwd+bwd", shape, run, flops=flops, torch_run=torch_run)


def cases(xp, quick):
    """relu_dropout and fused MLP cases on the array module xp; quick: smaller shapes."""
    if quick:
        return [_relu_dropout_case(xp, 512, 256), _mlp_case(xp, 256, [128, 64])]
    return [_relu_dropout_case(xp, 4096, 1024),
            _mlp_case(xp, 2048, [512, 256]),
            _mlp_case(xp, 2048, [1024, 1024, 512, 256])]
