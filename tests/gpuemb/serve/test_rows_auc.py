"""Reduced rows keep the model's ranking: every model, trained to a meaningful AUC, loses less than 0.001 of it
with fp16 or int8 rows. ``pytest tests/gpuemb/serve/test_rows_auc.py -s`` prints the AUCs (docs/perf/README.md,
"Inference bundle rows")."""
import numpy as np
import pytest

from gpuemb.io.synthetic import auc
from gpuemb.serve import Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.rows import FORMATS


MODELS = {"dlrm": {"bottom": (32,), "top": (64, 32)}, "dcn": {"n_cross": 2, "deep": (64, 32)},
          "deepfm": {"deep": (64, 32)}, "xdeepfm": {"cin": (8, 8), "deep": (64, 32)}, "pnn": {"deep": (64, 32)},
          "wide_deep": {"deep": (64, 32)}, "mmoe": {"n_tasks": 1, "expert": (32,), "tower": (16,)}}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_fp16_and_int8_rows_keep_the_auc(name, train, test_split, eval_output, tmp_path):
    model = train(name, MODELS[name], steps=200, batch=256)
    test = test_split(16384)
    trained = auc(eval_output(model, test.dense, test.sparse), test.label)
    aucs, rows = {}, {}
    for fmt in FORMATS:
        write_bundle(model, tmp_path / fmt, fmt)
        with Predictor(tmp_path / fmt, runtime="numpy") as p:
            aucs[fmt] = auc(p.predict(test.dense, test.sparse), test.label)
            rows[fmt] = p.tables["t0"].lookup(np.arange(1000))
    print(f"\n{name}, 200 steps: eval AUC {trained:.6f}; bundle AUC " +
          ", ".join(f"{f} {a:.6f} ({a - aucs['fp32']:+.6f})" for f, a in aucs.items()))
    assert trained > 0.7  # a model that ranks: a 0.5 model would keep its AUC under any rounding
    assert abs(aucs["fp32"] - trained) < 1e-6
    assert abs(aucs["fp16"] - aucs["fp32"]) < 0.001 and abs(aucs["int8"] - aucs["fp32"]) < 0.001
    assert not np.array_equal(rows["int8"], rows["fp32"])  # the int8 rows did change the weights
