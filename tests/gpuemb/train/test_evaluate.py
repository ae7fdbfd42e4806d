"""Evaluation streams the eval set in batches and gives the numbers of the whole set at once."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, matmul
from gpuemb.io.batch import Batch
from gpuemb.io.synthetic import auc as auc_ref
from gpuemb.nn import Module
from gpuemb import comm
from gpuemb.train.evaluate import OneProcess, evaluate, start_gather


class ArraySource:
    """Rows held in memory, in blocks of ``block`` rows, as the loader reads sources."""

    def __init__(self, batch, block=500):
        self.batch, self.block, self.n_rows = batch, block, batch.rows
        self.block_sizes = np.diff(np.r_[np.arange(0, self.n_rows, block), self.n_rows]).astype(np.int64)

    def read_block(self, i):
        return self.batch.slice(i * self.block, (i + 1) * self.block)


class LinearModel(Module):
    """Logits ``dense @ w``: ``[B]`` for one task, ``[B, T]`` for ``w [n_dense, T]``."""

    def __init__(self, w):
        self.w = Tensor(w, requires_grad=True)
        self.calls = []

    def forward(self, dense, sparse):
        self.calls.append(self.training)
        y = matmul(Tensor(np.asarray(dense)), self.w)
        return y.reshape(-1) if self.w.ndim == 1 or self.w.shape[1] == 1 else y


def data(rng, n, tasks):
    dense = rng.standard_normal((n, 4)).astype(np.float32)
    w = rng.standard_normal((4, tasks)).astype(np.float32)
    p = 1 / (1 + np.exp(-(dense @ w)))
    label = (rng.random((n, tasks)) < p).astype(np.float32)
    return Batch(label[:, 0] if tasks == 1 else label, dense, np.zeros((n, 1), np.int64)), w


def reference(logits, labels):
    logits, labels = logits.astype(np.float64), labels.astype(np.float64)
    loss = np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits))))
    return auc_ref(logits, labels), loss, np.mean((logits > 0) == (labels > 0.5))


@pytest.mark.parametrize("max_rows", [None, 3333])
def test_streaming_metrics_equal_those_of_the_whole_set(rng, max_rows):
    batch, w = data(rng, 5000, 1)
    model = LinearModel(w[:, 0])
    out = evaluate(model, ArraySource(batch), max_rows=max_rows, batch_size=700)
    n = max_rows or 5000
    logits = batch.dense[:n] @ w[:, 0]
    want = reference(logits, batch.label[:n])
    assert out["rows"] == n
    assert out["auc"] == pytest.approx(want[0], abs=1e-12)
    assert out["log_loss"] == pytest.approx(want[1], rel=1e-5)
    assert out["accuracy"] == pytest.approx(want[2], abs=1e-12)
    assert model.calls == [False] * -(-n // 700)  # every batch in eval mode, none twice
    assert out["rows_read"] == -(-n // 500) * 500  # the blocks that hold the rows evaluated, read whole, no more
    assert out["bytes_read"] == out["rows_read"] * (4 + 4 * 4 + 8)
    assert model.training and model.w.grad is None  # back in training mode, and no tape was kept


def test_each_task_has_its_own_metrics_and_the_top_level_is_their_mean(rng):
    batch, w = data(rng, 3000, 2)
    model = LinearModel(w).eval()
    out = evaluate(model, ArraySource(batch, 400), n_tasks=2, batch_size=1000)
    logits = batch.dense @ w
    for t in range(2):
        want = reference(logits[:, t], batch.label[:, t])
        assert out["task_auc"][t] == pytest.approx(want[0], abs=1e-12)
        assert out["task_log_loss"][t] == pytest.approx(want[1], rel=1e-5)
        assert out["task_accuracy"][t] == pytest.approx(want[2], abs=1e-12)
    assert out["auc"] == pytest.approx(np.mean(out["task_auc"]), abs=1e-15)
    assert not model.training  # a model evaluated in eval mode stays so


class RecordingSplit(OneProcess):
    """One process's evaluation, saying when each batch runs and when its result is taken."""

    def __init__(self):
        self.events = []

    def eval_start(self, model, batch, n):
        k = sum(e[0] == "run" for e in self.events)
        self.events.append(("run", k))
        done = super().eval_start(model, batch, n)
        return lambda: self.events.append(("take", k)) or done()


def test_each_batchs_result_is_taken_after_the_next_batch_has_started(rng):
    """So that on an overlapped communicator a batch's gather travels while the next batch runs."""
    batch, w = data(rng, 2500, 1)
    split = RecordingSplit()
    out = evaluate(LinearModel(w[:, 0]), ArraySource(batch), batch_size=1000, split=split)
    assert split.events == [("run", 0), ("run", 1), ("take", 0), ("run", 2), ("take", 1), ("take", 2)]
    assert out["rows"] == 2500
    assert out["auc"] == pytest.approx(reference(batch.dense @ w[:, 0], batch.label)[0], abs=1e-12)


def test_a_gather_on_an_overlapped_communicator_is_started_and_gives_the_blocking_ones_arrays(rng):
    logits, labels = rng.standard_normal((6, 2)).astype(np.float32), (rng.random((6, 2)) < 0.5).astype(np.float32)
    over = comm.OverlappedCommunicator(comm.LocalCommunicator())
    ops, start = [], over.start
    over.start = lambda op, *args: ops.append((op, args[-1])) or start(op, *args)
    try:
        take = start_gather(over, logits, labels, 5)
        assert ops == [("allgather", "eval")]  # started, not waited for
        for got, want in zip(take(), start_gather(comm.LocalCommunicator(), logits, labels, 5)()):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(take()[0], logits[:5])
        np.testing.assert_array_equal(take()[1], labels[:5])
    finally:
        over.close()
