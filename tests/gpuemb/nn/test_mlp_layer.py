import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.kernels.mlp import linear_forward_ref
from gpuemb.nn import MLP, Dropout, Linear

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="compares against torch, which is not installed")


def test_layout_and_names():
    mlp = MLP([13, 64, 32, 1], seed=0)
    shapes = {name: p.shape for name, p in mlp.named_parameters()}
    assert shapes == {"layers.0.weight": (64, 13), "layers.0.bias": (64,), "layers.1.weight": (32, 64),
                      "layers.1.bias": (32,), "layers.2.weight": (1, 32), "layers.2.bias": (1,)}
    assert all(p.dtype == np.float32 for p in mlp.parameters())


def test_initialization_follows_dlrm_and_the_seed():
    layer = Linear(300, 500, seed=3)
    assert abs(layer.weight.data.std() / np.sqrt(2 / 800) - 1) < 0.02
    assert abs(layer.bias.data.std() / np.sqrt(1 / 500) - 1) < 0.1
    np.testing.assert_array_equal(MLP([4, 6, 2], seed=5).layers[1].weight.data,
                                  MLP([4, 6, 2], seed=5).layers[1].weight.data)
    assert not np.array_equal(MLP([4, 6, 2], seed=5).layers[0].weight.data,
                              MLP([4, 6, 2], seed=6).layers[0].weight.data)


def test_eval_is_the_plain_relu_stack(rng):
    mlp = MLP([10, 40, 20, 3], dropout=0.5, seed=1).eval()
    x = rng.standard_normal((8, 10)).astype(np.float32)
    h = x
    for i, layer in enumerate(mlp.layers):
        h = linear_forward_ref(h, layer.weight.data, layer.bias.data, relu=i < 2)[0]
    np.testing.assert_allclose(mlp(x).data, h, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mlp(x).data, mlp(x).data)
    assert mlp.step == 0  # no draws outside training


def test_training_draws_a_new_mask_each_step(rng):
    mlp = MLP([10, 64, 1], dropout=0.5, seed=1)
    x = rng.standard_normal((16, 10)).astype(np.float32)
    first, second = mlp(x).data, mlp(x).data
    assert mlp.step == 2 and not np.allclose(first, second)
    mlp.step = 0
    np.testing.assert_array_equal(mlp(x).data, first)  # (seed, step) redraws the same mask


@pytest.mark.parametrize("last", [None, "relu", "sigmoid"])
def test_last_activation(rng, last):
    mlp = MLP([5, 7, 4], last_activation=last, seed=2)
    y = mlp(rng.standard_normal((30, 5)).astype(np.float32)).data
    if last == "relu":
        assert y.min() == 0 and y.max() > 0
    elif last == "sigmoid":
        assert 0 < y.min() and y.max() < 1
    else:
        assert y.min() < 0 < y.max()


def test_a_small_regression_loss_falls(rng):
    x = rng.standard_normal((256, 8)).astype(np.float32)
    target = np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]
    mlp = MLP([8, 32, 32, 1], dropout=0.1, seed=0)
    losses = []
    for _ in range(100):
        diff = mlp(x) - target
        loss = (diff * diff).mean()
        mlp.zero_grad()
        loss.backward()
        for p in mlp.parameters():
            p.data -= 0.1 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


@needs_torch
@pytest.mark.parametrize("last", [None, "sigmoid"])
def test_forward_and_backward_match_torch(rng, last):
    sizes = [16, 48, 33, 2]
    mlp = MLP(sizes, last_activation=last, seed=4)
    x = rng.standard_normal((12, 16)).astype(np.float32)
    gy = rng.standard_normal((12, 2)).astype(np.float32)
    linears = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    with torch.no_grad():
        for lin, layer in zip(linears, mlp.layers):
            lin.weight.copy_(torch.from_numpy(layer.weight.data))
            lin.bias.copy_(torch.from_numpy(layer.bias.data))
    h = torch.from_numpy(x)
    for i, lin in enumerate(linears):
        h = lin(h) if i == len(linears) - 1 else torch.relu(lin(h))
    h = torch.sigmoid(h) if last == "sigmoid" else h
    h.backward(torch.from_numpy(gy))
    y = mlp(x)
    y.backward(gy)
    np.testing.assert_allclose(y.data, h.detach().numpy(), rtol=1e-5, atol=1e-5)
    for lin, layer in zip(linears, mlp.layers):
        np.testing.assert_allclose(layer.weight.grad, lin.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layer.bias.grad, lin.bias.grad.numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
def test_input_gradient_matches_torch(rng):
    mlp = MLP([6, 9, 3], seed=8)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    xt = Tensor(x, requires_grad=True)
    mlp(xt).sum().backward()
    tx = torch.from_numpy(x).requires_grad_()
    w = [torch.from_numpy(layer.weight.data) for layer in mlp.layers]
    b = [torch.from_numpy(layer.bias.data) for layer in mlp.layers]
    (torch.relu(tx @ w[0].T + b[0]) @ w[1].T + b[1]).sum().backward()
    np.testing.assert_allclose(xt.grad, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="at least an input and an output"):
        MLP([4])
    with pytest.raises(ValueError, match="last_activation='tanh'"):
        MLP([4, 2], last_activation="tanh")
    with pytest.raises(ValueError, match=r"p=1.0 must lie in \[0, 1\)"):
        MLP([4, 3, 2], dropout=1.0)


def test_dropout_module(rng):
    drop = Dropout(0.25, seed=9)
    x = Tensor(rng.standard_normal((4, 50, 64)).astype(np.float32), requires_grad=True)
    y = drop(x)
    kept = y.data != 0
    assert y.shape == x.shape and abs(kept.mean() - 0.75) < 0.03
    np.testing.assert_allclose(y.data[kept], x.data[kept] / 0.75, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad, kept / np.float32(0.75), rtol=1e-6)
    assert drop.step == 1
    np.testing.assert_array_equal(drop.eval()(x).data, x.data)
