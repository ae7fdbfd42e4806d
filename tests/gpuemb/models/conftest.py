"""Shared pieces of the model tests: small tables, a small synthetic data set, a training loop, a head gradcheck.

Each is a fixture that hands back a function, since test files cannot import a conftest in importlib mode.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, bce_with_logits, gradcheck, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.synthetic import SyntheticConfig, auc, generate
from gpuemb.optim import Adam, AdagradRule
from gpuemb.store.options import Initializer, TableConfig

# 8 small tables and 4 dense features: every id is seen often in a few hundred steps, so learning shows fast.
SYNTHETIC = SyntheticConfig(n_dense=4, cardinalities=(1000, 500, 200, 100, 50, 1000, 300, 20), seed=1)


def _tables(n=len(SYNTHETIC.cardinalities), dim=8, **kw):
    kw = {"rule": AdagradRule(), "lr": 0.05, **kw}
    return [TableConfig(f"t{i}", dim, initializer=Initializer(seed=i), **kw) for i in range(n)]


@pytest.fixture
def make_tables():
    """``make_tables(n=8, dim=8, **TableConfig fields)``: n tables t0.., Adagrad at lr 0.05 unless told."""
    return _tables


@pytest.fixture(scope="session")
def synthetic():
    """(train Batch of 256·200 rows, held-out test Batch of 8192 rows, the teacher's AUC on the test rows)."""
    train, _ = generate(SYNTHETIC, 0, 256 * 200, "train")
    test, logits = generate(SYNTHETIC, 0, 8192, "test")
    return train, test, auc(logits, test.label)


def _fit(model, batch, steps, batch_size=256, lr=3e-3):
    """Adam on the dense parameters, the tables' own rules on the rows; returns the loss of every step.

    ``batch.label`` is ``[N]`` or ``[N, T]``; the loss is the mean BCE over samples (and tasks), and with T tasks
    the per-task losses ``[steps, T]`` come back instead.
    """
    opt = Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for s in range(steps):
        lo = s * batch_size % batch.rows
        b = batch.slice(lo, lo + batch_size)
        per_sample = bce_with_logits(model(b.dense, b.sparse), Tensor(b.label), reduction="none")
        opt.zero_grad()
        per_sample.mean().backward()
        opt.step()
        losses.append(to_host(per_sample.data).mean(axis=0))
    return np.array(losses)


@pytest.fixture
def fit():
    return _fit


def _evaluate(model, batch):
    """The model's held-out AUC (of each task) on ``batch``."""
    model.eval()
    with no_grad():
        logits = model(batch.dense, batch.sparse).numpy()
    if logits.ndim == 1:
        return auc(logits, batch.label)
    return [auc(logits[:, t], batch.label[:, t]) for t in range(logits.shape[1])]


@pytest.fixture
def evaluate():
    return _evaluate


def _set_parameter(model, dotted, tensor):
    *path, last = dotted.split(".")
    owner = model
    for part in path:
        owner = owner[int(part)] if part.isdigit() else getattr(owner, part)
    setattr(owner, last, tensor)


def _head_gradcheck(model, inputs):
    """Central differences on ``model.head(*inputs)`` against backward, for the inputs and every parameter.

    inputs: float64 arrays, the dense features and the stand-ins for what ``embed`` returns. The parameters are
    copied to float64 and swapped for gradcheck's leaves; so the fused kernels run their float64 path.
    The model stays in training mode, which records the tape (eval mode records none); the cases set no
    dropout, so every evaluation sees the same function.
    """
    names = [name for name, _ in model.named_parameters()]
    params = [to_host(p.data).astype(np.float64) for _, p in model.named_parameters()]

    def head(*tensors):
        for name, t in zip(names, tensors[len(inputs):]):
            _set_parameter(model, name, t)
        return model.head(*tensors[:len(inputs)])

    assert gradcheck(head, *inputs, *params, atol=1e-6, rtol=1e-5)
    # A leaf the head never reads passes gradcheck (0 against 0): so every one must also get a gradient.
    leaves = [Tensor(a, requires_grad=True) for a in (*inputs, *params)]
    head(*leaves).sum().backward()
    unused = [i for i, t in enumerate(leaves) if t.size and (t.grad is None or not np.any(to_host(t.grad)))]
    assert not unused, f"leaves {unused} (inputs first, then {names}) got no gradient"
    return len(params)


@pytest.fixture
def head_gradcheck():
    return _head_gradcheck
