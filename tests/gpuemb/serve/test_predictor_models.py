"""Every model's bundle predicts what the training model's eval forward gives, on held-out rows with keys the
tables never saw, with the NumPy interpreter and with onnxruntime."""
import importlib.util

import numpy as np
import pytest

from gpuemb.serve import Predictor
from gpuemb.serve.bundle import write_bundle

# (model, hyperparameters) of every model and every structural variant its emitter has
CASES = [("dlrm", {"bottom": (8,), "top": (16,)}), ("dlrm", {"bottom": (8,), "top": (16,), "self_interaction": True}),
         ("dcn", {"n_cross": 2, "deep": (16,)}), ("dcn", {"n_cross": 2, "rank": 3, "deep": (16,), "bottom": (8, 4)}),
         ("dcn", {"rank": 3, "structure": "parallel", "deep": (16,)}),  # the last: the dense-free test's
         ("deepfm", {"deep": (16,)}), ("xdeepfm", {"cin": (4, 3), "deep": (16,)}), ("pnn", {"deep": (16,)}),
         ("wide_deep", {"deep": (16,)}), ("mmoe", {"expert": (8,), "tower": (4,)}),
         ("mmoe", {"n_tasks": 1, "expert": (8,), "tower": (4,)})]

RUNTIMES = ["numpy", pytest.param("onnxruntime", marks=pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed (the test extra has it)"))]


@pytest.mark.parametrize("shared", [False, True], ids=["per-feature", "shared"])
@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{'-'.join(map(str, h.values()))}" for n, h in CASES])
def test_bundle_predicts_the_eval_output(case, shared, train, held_out, eval_output, tmp_path):
    name, hyper = case
    model = train(name, hyper, shared)
    dense, sparse = held_out()
    want = eval_output(model, dense, sparse)
    write_bundle(model, tmp_path, "fp32")
    for runtime in ("numpy", "onnxruntime") if importlib.util.find_spec("onnxruntime") else ("numpy",):
        with Predictor(tmp_path, runtime=runtime) as p:
            got = p.predict(dense, sparse)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=runtime)
    assert np.std(want) > 1e-3  # trained outputs that differ by sample: a constant would pass too easily


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", ["dcn", "deepfm", "pnn", "wide_deep", "mmoe"])
def test_models_without_dense_features(name, runtime, train, held_out, eval_output, tmp_path):
    hyper = dict(CASES)[name]
    model = train(name, hyper, n_dense=0)
    dense, sparse = held_out(n_dense=0)
    write_bundle(model, tmp_path)
    with Predictor(tmp_path, runtime=runtime) as p:
        np.testing.assert_allclose(p.predict(dense, sparse), eval_output(model, dense, sparse), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["normal", "truncated_normal"])
def test_fp16_tables_and_normal_initializers(kind, train, held_out, eval_output, tmp_path):
    """A float16 table's absent keys read their initial weights rounded to float16, as the store's eval does."""
    model = train("deepfm", {"deep": (16,)}, dtype="float16", kind=kind)
    dense, sparse = held_out()
    write_bundle(model, tmp_path)
    with Predictor(tmp_path, runtime="numpy") as p:
        np.testing.assert_allclose(p.predict(dense, sparse), eval_output(model, dense, sparse), rtol=0, atol=1e-5)


def test_probabilities_are_the_sigmoid_of_the_logits(train, held_out, eval_output, tmp_path):
    model = train("dlrm", dict(CASES)["dlrm"])
    dense, sparse = held_out()
    write_bundle(model, tmp_path)
    with Predictor(tmp_path, runtime="numpy") as p:
        got = p.predict(dense, sparse, probabilities=True)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-eval_output(model, dense, sparse))), rtol=1e-6, atol=1e-7)
