"""The metrics against references on fresh random data: sklearn where installed, slow exact definitions always."""
import numpy as np
import pytest

from gpuemb.metrics import AUC, Accuracy, LogLoss, accuracy, auc, log_loss


def pairwise_auc(scores, labels):
    """AUC by its definition: over every (positive, negative) pair, 1 if the positive scores higher, 1/2 on a tie."""
    pos, neg = scores[labels > 0.5], scores[labels < 0.5]
    diff = pos[:, None] - neg[None, :]
    return ((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size


def data(rng, n, ties=False):
    z = rng.standard_normal(n)
    if ties:
        z = np.round(z * 4) / 4  # a few dozen distinct values: most rows tie with others
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * z))).astype(np.float32)
    return z.astype(np.float32), y


@pytest.mark.parametrize("ties", [False, True])
def test_auc_equals_the_pairwise_definition(xp, rng, ties):
    z, y = data(rng, 3000, ties)
    assert auc(xp.asarray(z), xp.asarray(y)) == pytest.approx(pairwise_auc(z, y), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_auc_equals_sklearn(rng, ties):
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is not installed")
    z, y = data(rng, 20000, ties)
    assert auc(z, y) == pytest.approx(metrics.roc_auc_score(y, z), abs=1e-12)


def test_log_loss_and_accuracy_equal_their_definitions(xp, rng):
    z, y = data(rng, 5000)
    z = z * 3
    p = 1 / (1 + np.exp(-z.astype(np.float64)))
    expect = -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))
    assert log_loss(xp.asarray(z), xp.asarray(y)) == pytest.approx(expect, rel=1e-9)
    assert accuracy(xp.asarray(z), xp.asarray(y)) == pytest.approx(np.mean((p > 0.5) == (y > 0.5)))


def test_log_loss_of_extreme_logits_stays_finite():
    z = np.array([-200.0, 200.0, 200.0, -200.0], np.float32)
    y = np.array([0, 1, 0, 1], np.float32)
    assert log_loss(z, y) == pytest.approx(100.0)  # two rows right (0 loss), two wrong by 200 nats each


def test_streaming_equals_one_batch(xp, rng):
    z, y = data(rng, 10000, ties=True)
    metrics = [AUC(), LogLoss(), Accuracy()]
    cuts = np.sort(rng.choice(np.arange(1, z.size), 7, replace=False))
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, z.size]):
        for m in metrics:
            m.update(xp.asarray(z[a:b]), xp.asarray(y[a:b]))
    assert metrics[0].count == z.size
    assert metrics[0].result() == pytest.approx(pairwise_auc(z, y), abs=1e-12)
    assert metrics[1].result() == pytest.approx(log_loss(z, y), rel=1e-12)
    assert metrics[2].result() == pytest.approx(accuracy(z, y), rel=1e-12)
    for m in metrics:
        m.reset()
        with pytest.raises(ValueError, match="no batch"):
            m.result()


def test_update_copies_the_batch(rng):
    z, y = data(rng, 1000)
    m = AUC()
    buf = z.copy()
    m.update(buf, y)
    buf[:] = -buf  # a loader reuses its buffers
    assert m.result() == pytest.approx(auc(z, y))


@pytest.mark.parametrize("logits, labels, match", [
    (np.array([0.1, 0.2], np.float32), np.array([1, 1], np.float32), "1 negatives|2 positives and 0 negatives"),
    (np.array([0.1, np.nan], np.float32), np.array([1, 0], np.float32), "NaN or infinite"),
    (np.array([0.1, 0.2, 0.3], np.float32), np.array([1, 0], np.float32), r"one shape \[N\]"),
    (np.array([[0.1, 0.2]], np.float32), np.array([[1, 0]], np.float32), "one metric per task"),
    (np.array([0.1, 0.2], np.float32), np.array([1, 2], np.int64), "must be 0 or 1"),
    (np.array([1, 2], np.int64), np.array([1, 0], np.int64), "want float logits"),
])
def test_bad_input_is_named(logits, labels, match):
    with pytest.raises(ValueError, match=match):
        auc(logits, labels)


def test_every_metric_checks_its_batch():
    for m in (AUC(), LogLoss(), Accuracy()):
        with pytest.raises(ValueError, match=type(m).__name__ + r".update: .*NaN"):
            m.update(np.array([np.inf, 0.0], np.float32), np.array([0, 1], np.float32))
