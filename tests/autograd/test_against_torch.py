"""A composite expression's values and gradients against torch, where torch is installed (micrograd's test)."""
import numpy as np
import pytest

from gpuemb import autograd as ag

torch = pytest.importorskip("torch", reason="torch is not installed; `pip install torch` to compare against it")


def test_composite_expression_matches_torch(rng):
    x, W1, b1 = rng.standard_normal((6, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    W2, y = rng.standard_normal((3, 4)), (rng.random((6, 3)) > 0.5).astype(np.float64)

    def model(m, x, W1, b1, W2):
        h = m.tanh(m.linear(x, W1, b1)) * m.sigmoid(x[:, :4]) + m.relu(x[:, 1:5]) ** 2
        logits = (m.softmax(h, 1) @ W2.T) / m.exp(m.log(m.sum(h * h, 1, True) + 1.0))
        return m.bce(logits, y) + m.mean(m.log_softmax(logits, 0)) * 0.1 + m.mse(logits[1:3], y[1:3])

    class Ours:
        linear, tanh, sigmoid, relu, exp, log = ag.linear, ag.tanh, ag.sigmoid, ag.relu, ag.exp, ag.log
        softmax, log_softmax, mse = ag.softmax, ag.log_softmax, ag.mse
        sum, mean = staticmethod(lambda a, axis, keepdims: a.sum(axis, keepdims)), ag.mean
        bce = staticmethod(lambda logits, t: ag.bce_with_logits(logits, t))

    class Torch:
        F = torch.nn.functional
        linear, tanh, sigmoid, relu, exp, log = F.linear, torch.tanh, torch.sigmoid, torch.relu, torch.exp, torch.log
        softmax, log_softmax, mean = F.softmax, F.log_softmax, torch.mean
        mse = staticmethod(lambda a, b: torch.nn.functional.mse_loss(a, torch.as_tensor(b)))
        sum = staticmethod(lambda a, axis, keepdims: a.sum(axis, keepdim=keepdims))
        bce = staticmethod(lambda logits, t: torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.as_tensor(t)))

    ours = [ag.Tensor(a.copy(), requires_grad=True) for a in (x, W1, b1, W2)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, W1, b1, W2)]
    loss, ref = model(Ours, *ours), model(Torch, *theirs)
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-10)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-9, atol=1e-12)
