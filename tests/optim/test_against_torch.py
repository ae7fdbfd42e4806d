"""Optimizer trajectories against torch.optim, where torch is installed."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.optim import SGD, Adagrad, Adam, AdamW

torch = pytest.importorskip("torch", reason="torch is not installed; `pip install torch` to compare against it")

CASES = [
    (SGD, "SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (SGD, "SGD", dict(lr=0.1, momentum=0.5, weight_decay=0.1)),
    (Adagrad, "Adagrad", dict(lr=0.1, initial_accumulator_value=0.2, eps=1e-8, weight_decay=0.05)),
    (Adam, "Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (AdamW, "AdamW", dict(lr=0.02, betas=(0.9, 0.95), weight_decay=0.3)),
]


@pytest.mark.parametrize("ours, theirs, kwargs", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_trajectory_matches_torch(rng, ours, theirs, kwargs):
    w0, grads = rng.standard_normal((4, 3)), [rng.standard_normal((4, 3)) for _ in range(10)]
    w = Tensor(w0.copy(), requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    opt, topt = ours([w], **kwargs), getattr(torch.optim, theirs)([tw], **kwargs)
    for g in grads:
        w.grad, tw.grad = g, torch.tensor(g)
        opt.step()
        topt.step()
        np.testing.assert_allclose(w.data, tw.detach().numpy(), rtol=1e-10, atol=1e-12)
