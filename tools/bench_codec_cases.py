"""Benchmark cases of the all-to-all's wire codecs (int8 with a per-row scale, bf16), each encode then decode, with
the same rounding in torch as the peer where torch imports."""
import numpy as np

import benchlib
from gpuemb.autograd.backend import to_host
from gpuemb.kernels.codecs import bf16_decode, bf16_encode, int8_decode, int8_encode


def _codec_cases(xp, N, D):
    x, = benchlib.arrays(xp, np.random.default_rng(4), (N, D))
    torch, device = benchlib.peer(xp)
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
    """Codec cases on the array module xp; quick: small shapes."""
    return _codec_cases(xp, 1024, 64) if quick else _codec_cases(xp, 65536, 128)
