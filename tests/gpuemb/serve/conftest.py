"""Shared pieces of the bundle tests: small trained models of every kind, their held-out rows with keys the
tables never saw, and the training model's own eval output to compare a bundle against.

Each is a fixture that hands back a function, since test files cannot import a conftest in importlib mode.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, bce_with_logits, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.synthetic import SyntheticConfig, generate
from gpuemb.models import build
from gpuemb.optim import Adam, AdagradRule
from gpuemb.store.options import Initializer, TableConfig

SYNTHETIC = SyntheticConfig(n_dense=4, cardinalities=(1000, 500, 200, 100, 50, 1000, 300, 20), seed=1)
F = len(SYNTHETIC.cardinalities)


def _tables(shared, dim=4, dtype="float32", kind="uniform"):
    def cfg(name, seed):
        return TableConfig(name, dim, dtype, Initializer(kind, 0.05 if kind != "uniform" else None, seed),
                           AdagradRule(), 0.1)
    return cfg("shared", 7) if shared else [cfg(f"t{i}", i) for i in range(F)]


def _train(name, hyper, shared=False, n_dense=SYNTHETIC.n_dense, steps=20, batch=128, dtype="float32",
           kind="uniform", seed=0):
    """A model of ``name`` trained ``steps`` steps on the synthetic rows, so rows and weights have moved."""
    n_tasks = hyper.get("n_tasks", 2) if name == "mmoe" else 1
    extra = {"n_features": F} if shared else {}
    model = build(name, n_dense, _tables(shared, dtype=dtype, kind=kind), seed, **hyper, **extra)
    data, _ = generate(SYNTHETIC, 0, steps * batch, "train")
    opt = Adam(model.parameters(), lr=1e-2)
    model.train()
    for s in range(steps):
        b = data.slice(s * batch, (s + 1) * batch)
        label = np.repeat(b.label.reshape(-1, 1), n_tasks, axis=1) if n_tasks > 1 else b.label
        loss = bce_with_logits(model(b.dense[:, :n_dense], b.sparse), Tensor(label))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture
def train():
    """``train(name, hyper, shared=False, n_dense=4, steps=20, ...)``: an eval-mode model trained a little."""
    return _train


def _held_out(rows=512, n_dense=SYNTHETIC.n_dense, seed=3):
    """``(dense, sparse)`` held-out rows; a quarter of them hold keys no table has seen (huge and negative ones)."""
    test, _ = generate(SYNTHETIC, seed, rows, "test")
    sparse = test.sparse.astype(np.int64).copy()
    rng = np.random.default_rng(seed)
    fresh = rng.random(sparse.shape) < 0.25
    sparse[fresh] = rng.integers(-2 ** 62, 2 ** 62, int(fresh.sum()))
    return np.ascontiguousarray(test.dense[:, :n_dense]), sparse


@pytest.fixture
def held_out():
    return _held_out


def _eval_output(model, dense, sparse):
    """The training model's eval forward: what a bundle must reproduce."""
    with no_grad():
        return to_host(model.eval()(dense, sparse).data)


@pytest.fixture
def eval_output():
    return _eval_output


@pytest.fixture
def test_split():
    """``test_split(rows)``: the synthetic data's held-out ``Batch`` (dense, sparse, label), as generated."""
    return lambda rows: generate(SYNTHETIC, 0, rows, "test")[0]
