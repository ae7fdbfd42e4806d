"""Bundles of models that pool bags: fixed multi-hot, jagged under each pooling mode (weighted sum included, empty
bags too), tables of several dims, a shared table; each trained a few steps, exported, and predicted equal to the
training model's eval forward on fresh rows (a quarter of the keys never seen), from every input form; and a
request whose features do not match the bundle's is one line."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, bce_with_logits, no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.models import build
from gpuemb.optim import Adam, AdagradRule
from gpuemb.serve import BundleError, Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.store.options import Initializer, TableConfig

NAMES = ("a", "b", "c")
N_DENSE = 3


def _tables(dims, shared=False):
    def cfg(name, dim, seed):
        return TableConfig(name, dim, "float32", Initializer("uniform", None, seed), AdagradRule(), 0.1)
    return cfg("shared", dims[0], 9) if shared else [cfg(f"t_{n}", d, i) for i, (n, d) in enumerate(zip(NAMES, dims))]


def _jagged(rng, B, weighted=False, most=4):
    """Bags of 0..most keys (empty ones included), a quarter of the keys never seen in training."""
    lengths = rng.integers(0, most + 1, (len(NAMES), B))
    n = int(lengths.sum())
    keys = np.where(rng.random(n) < 0.25, rng.integers(2 ** 40, 2 ** 62, n), rng.integers(0, 60, n))
    weights = rng.uniform(0.1, 2.0, n).astype(np.float32) if weighted else None
    return JaggedFeatures.from_lengths(NAMES, keys, lengths, weights)


def _matrix(rng, B, hotness):
    keys = rng.integers(0, 60, (B, sum(hotness)))
    fresh = rng.random(keys.shape) < 0.25
    keys[fresh] = rng.integers(2 ** 40, 2 ** 62, int(fresh.sum()))
    return keys


def _trained(name, hyper, dims, batches, shared=False):
    extra = {"n_features": len(NAMES)} if shared else {}
    model = build(name, N_DENSE, _tables(dims, shared), 0, **hyper, **extra)
    opt = Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    model.train()
    for sparse in batches:
        B = sparse.batch_size if isinstance(sparse, JaggedFeatures) else sparse.shape[0]
        dense = rng.standard_normal((B, N_DENSE)).astype(np.float32)
        loss = bce_with_logits(model(dense, sparse), Tensor(rng.integers(0, 2, B).astype(np.float32)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _want(model, dense, sparse):
    with no_grad():
        return to_host(model(dense, sparse).data)


# (id, model, hyperparameters, table dims, shared, hotness or None for jagged, weighted)
CASES = [("multi-hot", "dcn", {"n_cross": 1, "deep": (8,), "hotness": (1, 3, 2)}, (4, 4, 4), False, (1, 3, 2), False),
         ("jagged-sum", "wide_deep", {"deep": (8,)}, (4, 4, 4), False, None, False),
         ("jagged-mean", "deepfm", {"deep": (8,), "pooling": "mean"}, (4, 4, 4), True, None, False),
         ("jagged-max", "dlrm", {"bottom": (4,), "top": (8,), "pooling": "max"}, (4, 4, 4), False, None, False),
         ("jagged-weighted", "wide_deep", {"deep": (8,)}, (4, 4, 4), True, None, True),
         ("mixed-dims-jagged", "mmoe", {"n_tasks": 1, "expert": (8,), "tower": (4,), "pooling": "mean"}, (2, 5, 3),
          False, None, False),
         ("mixed-dims-multi-hot", "wide_deep", {"deep": (8,), "hotness": (2, 1, 3)}, (3, 1, 4), False, (2, 1, 3),
          False)]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request, tmp_path_factory):
    """``(model, bundle folder, hotness, make(rng, B) -> sparse, weighted)`` of a case, trained and exported."""
    _, name, hyper, dims, shared, hotness, weighted = request.param
    rng = np.random.default_rng(0)
    make = (lambda r, B: _matrix(r, B, hotness)) if hotness else (lambda r, B: _jagged(r, B, weighted))
    model = _trained(name, hyper, dims, [make(rng, 64) for _ in range(4)], shared)
    folder = tmp_path_factory.mktemp("bundle")
    write_bundle(model, folder, "fp32", NAMES, hotness or ("jagged",) * len(NAMES))
    return model, folder, hotness, make, weighted


def _as_dict(sparse, hotness):
    """The same request as ``{name: bags}``: lists of key lists for a matrix, (values, lengths[, weights]) else."""
    if hotness:
        starts = np.cumsum((0,) + hotness)
        return {n: [list(row) for row in sparse[:, a:a + k]] for n, a, k in zip(NAMES, starts, hotness)}
    out = {}
    for f, n in enumerate(NAMES):
        keys, offsets, weights = sparse.feature(f)
        out[n] = (keys, np.diff(offsets)) + (() if weights is None else (weights,))
    return out


@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
def test_bundle_predicts_the_eval_forward(case, runtime):
    pytest.importorskip(runtime)  # onnxruntime: the test extra has it
    model, folder, hotness, make, _ = case
    rng = np.random.default_rng(7)
    sparse = make(rng, 200)
    dense = rng.standard_normal((200, N_DENSE)).astype(np.float32)
    want = _want(model, dense, sparse)
    assert np.std(want) > 1e-4  # outputs that differ by sample: a constant would pass too easily
    with Predictor(folder, runtime=runtime) as p:
        for form in (sparse, _as_dict(sparse, hotness)):
            np.testing.assert_allclose(p.predict(dense, form), want, rtol=0, atol=1e-5)


def test_the_manifest_records_the_features(case):
    model, folder, hotness, _, _ = case
    with Predictor(folder, runtime="numpy") as p:
        m = p.manifest
    assert [f["name"] for f in m["features"]] == list(NAMES)
    assert [f["hotness"] for f in m["features"]] == list(hotness or ("jagged",) * 3)
    c = m["collections"]["embeddings"]
    assert c["pooling"] == model.embeddings.mode and c["dims"] == list(model.embeddings.dims)


def test_empty_bags_pool_as_training_does(case):
    """Every bag of a row empty: zeros under sum, mean and max alike, as the training kernels give."""
    model, folder, hotness, _, weighted = case
    if hotness:
        pytest.skip("a fixed-hotness feature has no empty bag")
    lengths = np.zeros((3, 4), np.int64)
    lengths[:, 1:] = 2
    keys = np.arange(int(lengths.sum()))
    sparse = JaggedFeatures.from_lengths(NAMES, keys, lengths, np.ones(keys.size, np.float32) if weighted else None)
    dense = np.random.default_rng(2).standard_normal((4, N_DENSE)).astype(np.float32)
    with Predictor(folder, runtime="numpy") as p:
        np.testing.assert_allclose(p.predict(dense, sparse), _want(model, dense, sparse), rtol=0, atol=1e-5)


def _refused(p, sparse, *words, B=4):
    with pytest.raises(BundleError) as e:
        p.predict(np.zeros((B, N_DENSE), np.float32), sparse)
    text = str(e.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_a_bundle_whose_features_do_not_match_the_input(tmp_path):
    """Each way a batch can differ from the bundle's features is one BundleError line naming what differs."""
    hotness = (1, 3, 2)
    model = _trained("dcn", {"n_cross": 1, "deep": (8,), "hotness": hotness}, (4, 4, 4), [])
    write_bundle(model, tmp_path, "fp32", NAMES, hotness)
    rng = np.random.default_rng(3)
    with Predictor(tmp_path, runtime="numpy") as p:
        _refused(p, rng.integers(0, 9, (4, 3)), "[B, sum(hotness)] = [B, 6]", "a 1, b 3, c 2")
        _refused(p, {"a": [[1]] * 4, "b": [[1, 2, 3]] * 4}, "lacks 'c'")
        _refused(p, {"a": [[1]] * 4, "b": [[1, 2, 3]] * 4, "c": [[1, 2]] * 4, "d": [[5]] * 4}, "has 'd'")
        _refused(p, {"a": [[1]] * 4, "b": [[1, 2, 3]] * 3 + [[1]], "c": [[1, 2]] * 4}, "'b' has 1 keys in row 3",
                 "hotness 3")
        _refused(p, {"a": [[1]] * 4, "b": [[1, 2, 3]] * 4, "c": [[1, 2]] * 5}, "different batch sizes", "c: 5")
        _refused(p, JaggedFeatures.from_lengths(("a", "x", "c"), np.arange(24), np.full((3, 4), 2)), "lacks 'b'",
                 "has 'x'")
        _refused(p, {"a": [[1.5]] * 4, "b": [[1, 2, 3]] * 4, "c": [[1, 2]] * 4}, "'a'", "float64")
    mean = _trained("dlrm", {"bottom": (4,), "top": (8,), "pooling": "mean"}, (4, 4, 4), [])
    write_bundle(mean, tmp_path / "mean", "fp32", NAMES, ("jagged",) * 3)
    with Predictor(tmp_path / "mean", runtime="numpy") as p:
        weighted = JaggedFeatures.from_lengths(NAMES, np.arange(12), np.ones((3, 4), np.int64), np.ones(12))
        _refused(p, weighted, "weights", "pools bags by mean")
