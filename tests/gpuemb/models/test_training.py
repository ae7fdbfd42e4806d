"""Each model learns: on planted-teacher synthetic data its loss falls and its held-out AUC is well above chance.

The synthetic teacher's own AUC on the test rows is 0.84 (printed on failure); 200 steps of 256 rows take the
models to about 0.73 to 0.76, so 0.7 is a bound each clears with room. MMoE also learns both tasks of the
census-income sample.
"""
import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.census import read_census
from gpuemb.models import build

CENSUS = "tests/io/data/census_income_sample.csv"

# model -> hyperparameters that keep it quick on 2 CPU cores
SMALL = {
    "dlrm": {"bottom": (32,), "top": (64, 32)},
    "dcn": {"n_cross": 2, "deep": (64, 32)},
    "dcn_parallel_lowrank": {"n_cross": 2, "rank": 8, "structure": "parallel", "deep": (64, 32)},
    "deepfm": {"deep": (64, 32)},
    "xdeepfm": {"cin": (16, 16), "deep": (64, 32)},
    "pnn": {"deep": (64, 32)},
    "wide_deep": {"deep": (64, 32)},
    "mmoe": {"n_tasks": 1, "expert": (32,), "tower": (16,)},
}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_trains_on_synthetic_data(case, make_tables, synthetic, fit, evaluate):
    train, test, teacher_auc = synthetic
    model = build(case.split("_parallel")[0], train.dense.shape[1], make_tables(dim=8), seed=0, **SMALL[case])
    losses = fit(model, train, steps=200)
    first, last = losses[:30].mean(), losses[-30:].mean()
    held_out = evaluate(model, test)
    # PNN's loss fell by 0.048 to 0.062 over six draws of its initial rows (2026-11-28), all to about 0.487: the
    # first steps' mean follows the draw, so the drop asked for sits below that spread
    assert last < first - 0.04, f"{case}: loss {first:.4f} -> {last:.4f}"
    assert held_out > 0.7, f"{case}: held-out AUC {held_out:.4f} (teacher {teacher_auc:.4f})"


def test_mmoe_learns_both_census_tasks(make_tables, fit, pytestconfig):
    data = Batch.concat(list(read_census(pytestconfig.rootpath / CENSUS)))
    assert data.label.shape == (200, 2)
    model = build("mmoe", data.dense.shape[1], make_tables(data.sparse.shape[1], dim=8), seed=0,
                  expert=(32,), tower=(16,))
    losses = fit(model, data, steps=48, batch_size=50, lr=1e-2)  # 12 passes over the 200 rows
    first, last = losses[:4].mean(axis=0), losses[-4:].mean(axis=0)  # one pass each, [2]: never married, income
    assert losses.shape == (48, 2) and np.all(last < 0.25 * first), f"per-task loss {first} -> {last}"
