"""Each model's head against a NumPy reference of its paper's formula, on fresh random inputs.

The MLPs inside are the fused ``gpuemb.nn.MLP`` (checked against NumPy in tests/gpuemb/nn); here they are
applied to the reference's own inputs, so what is checked is how each model wires its parts together.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, no_grad
from gpuemb.kernels.cross import cross_ref
from gpuemb.models import build

B, F, D, N_DENSE = 5, 4, 3, 2


def mlp(module, x):
    with no_grad():
        return module(Tensor(x.astype(np.float32))).numpy()


def linear(module, x):
    return x @ module.weight.numpy().T + module.bias.numpy()


@pytest.fixture
def inputs(rng):
    return (rng.standard_normal((B, N_DENSE)).astype(np.float32), rng.standard_normal((B, F, D)).astype(np.float32),
            rng.standard_normal((B, F, 1)).astype(np.float32))


def head(model, dense, emb, weights):
    model.eval()
    with no_grad():
        args = (emb, weights) if model.first_order else (emb,)
        return model.head(Tensor(dense), *map(Tensor, args)).numpy()


def dense_field(model, dense, emb):
    return np.concatenate([emb, linear(model.dense_field.proj, dense)[:, None, :]], axis=1)


def first_order(model, dense, weights):
    return weights.sum(axis=(1, 2)) + dense @ model.first.weight.numpy()[0] + model.first.bias.numpy()[0]


def fm(fields):
    s = fields.sum(axis=1)
    return 0.5 * (s * s - (fields * fields).sum(axis=1)).sum(axis=1)


def cin(model, x0):
    x, pooled = x0, []
    for layer in model.cin.layers:
        w = layer.weight.numpy()
        x = np.einsum("hij,bid,bjd->bhd", w.reshape(w.shape[0], x.shape[1], x0.shape[1]), x, x0)
        pooled.append(x.sum(axis=2))
    return linear(model.cin.out, np.concatenate(pooled, axis=1))[:, 0]


def randomize(model, rng):
    """Zero-initialised weights (first-order, cross biases) drawn afresh, so the reference sees them at work."""
    for p in model.parameters():
        p.data[...] = p.data + rng.standard_normal(p.shape).astype(p.dtype) * 0.1


def test_dlrm(inputs, make_tables):
    dense, emb, _ = inputs
    model = build("dlrm", N_DENSE, make_tables(F, D), bottom=(4,), top=(6,))
    bottom = mlp(model.bottom, dense)
    z = np.concatenate([bottom[:, None], emb], axis=1)
    i, j = np.tril_indices(F + 1, -1)
    top_in = np.zeros((B, model.top.layers[0].weight.shape[1]), np.float32)
    top_in[:, :D + i.size] = np.concatenate([bottom, np.einsum("bid,bjd->bij", z, z)[:, i, j]], axis=1)
    np.testing.assert_allclose(head(model, *inputs), mlp(model.top, top_in)[:, 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hyper", [{}, {"rank": 2, "structure": "parallel", "deep": (5,)},
                                   {"structure": "parallel", "deep": ()}, {"rank": 2, "bottom": (6, 4)},
                                   {"structure": "parallel", "bottom": (3,)}])
def test_dcn(hyper, inputs, make_tables, rng):
    dense, emb, _ = inputs
    model = build("dcn", N_DENSE, make_tables(F, D), n_cross=2, **({"deep": (5,)} | hyper))
    randomize(model, rng)
    bottom = dense if model.bottom is None else np.maximum(mlp(model.bottom, dense), 0)  # ReLU on its last layer too
    x0 = np.concatenate([emb.reshape(B, -1), bottom], axis=1)
    x = x0
    for layer in model.cross:
        weights = [layer.weight.numpy()] if layer.form == "matrix" else [layer.u.numpy(), layer.v.numpy()]
        x = cross_ref(x0, x, weights, layer.bias.numpy(), layer.form)
    if model.structure == "stacked":
        want = mlp(model.deep, x)[:, 0]
    else:
        both = x if model.deep is None else np.concatenate([x, mlp(model.deep, x0)], axis=1)
        want = linear(model.out, both)[:, 0]
    np.testing.assert_allclose(head(model, *inputs), want, rtol=1e-4, atol=1e-4)


def test_deepfm(inputs, make_tables, rng):
    dense, emb, weights = inputs
    model = build("deepfm", N_DENSE, make_tables(F, D), deep=(5,))
    randomize(model, rng)
    fields = dense_field(model, dense, emb)
    want = first_order(model, dense, weights) + fm(fields) + mlp(model.deep, fields.reshape(B, -1))[:, 0]
    np.testing.assert_allclose(head(model, *inputs), want, rtol=1e-5, atol=1e-5)


def test_xdeepfm(inputs, make_tables, rng):
    dense, emb, weights = inputs
    model = build("xdeepfm", N_DENSE, make_tables(F, D), cin=(3, 2), deep=(5,))
    randomize(model, rng)
    fields = dense_field(model, dense, emb)
    want = first_order(model, dense, weights) + cin(model, fields) + mlp(model.deep, fields.reshape(B, -1))[:, 0]
    np.testing.assert_allclose(head(model, *inputs), want, rtol=1e-4, atol=1e-4)


def test_pnn(inputs, make_tables):
    dense, emb, _ = inputs
    model = build("pnn", N_DENSE, make_tables(F, D), deep=(5,))
    fields = dense_field(model, dense, emb)
    i, j = np.tril_indices(F + 1, -1)  # the pairs i > j, row-major: the dot interaction's order
    products = np.einsum("bid,bjd->bij", fields, fields)[:, i, j]
    want = mlp(model.deep, np.concatenate([fields.reshape(B, -1), products], axis=1))[:, 0]
    np.testing.assert_allclose(head(model, *inputs), want, rtol=1e-5, atol=1e-5)


def test_wide_deep(inputs, make_tables, rng):
    dense, emb, weights = inputs
    model = build("wide_deep", N_DENSE, make_tables(F, D), deep=(5,))
    randomize(model, rng)
    wide = weights.sum(axis=(1, 2)) + dense @ model.wide.weight.numpy()[0] + model.wide.bias.numpy()[0]
    want = wide + mlp(model.deep, np.concatenate([emb.reshape(B, -1), dense], axis=1))[:, 0]
    np.testing.assert_allclose(head(model, *inputs), want, rtol=1e-5, atol=1e-5)


def test_mmoe(inputs, make_tables):
    dense, emb, _ = inputs
    model = build("mmoe", N_DENSE, make_tables(F, D), n_tasks=3, n_experts=4, expert=(6, 5), tower=(3,))
    x = np.concatenate([emb.reshape(B, -1), dense], axis=1)
    experts = np.stack([mlp(e, x) for e in model.experts], axis=1)  # [B, E, H]
    want = []
    for gate, tower in zip(model.gates, model.towers):
        g = np.exp(linear(gate, x))
        g /= g.sum(axis=1, keepdims=True)
        want.append(mlp(tower, np.einsum("be,beh->bh", g, experts))[:, 0])
    np.testing.assert_allclose(head(model, *inputs), np.stack(want, axis=1), rtol=1e-5, atol=1e-5)
