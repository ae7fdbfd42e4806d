"""Each model learns: on planted-teacher synthetic data its loss falls and its held-out AUC is well above chance.

The synthetic teacher's own AUC on the test rows is about 0.84 (printed on failure); 300 steps of 256 rows reach
a good part of it. MMoE learns both tasks of the census-income sample.
"""
import numpy as np
import pytest

from gpuemb.models import build

# model -> hyperparameters that keep it quick on 2 CPU cores
SMALL = {
    "dlrm": {"bottom": (32,), "top": (64, 32)},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_trains_on_synthetic_data(name, make_tables, synthetic, fit, evaluate):
    train, test, teacher_auc = synthetic
    model = build(name, train.dense.shape[1], make_tables(dim=8), seed=0, **SMALL[name])
    losses = fit(model, train, steps=300)
    first, last = losses[:30].mean(), losses[-30:].mean()
    held_out = evaluate(model, test)
    assert last < first - 0.05, f"{name}: loss {first:.4f} -> {last:.4f}"
    assert held_out > 0.7, f"{name}: held-out AUC {held_out:.4f} (teacher {teacher_auc:.4f})"
