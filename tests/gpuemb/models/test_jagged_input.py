"""Every model on jagged input: bags of any length per feature (empty ones too), pooled by the model's setting."""
import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.models import MODELS, build

B, F, D = 7, 3, 4


def jagged(rng):
    lengths = rng.integers(0, 5, (F, B))
    lengths[0, 2] = lengths[2, 5] = 0  # empty bags, which pool to zeros as in TorchRec
    lengths[1, 3] = 4
    return JaggedFeatures.from_lengths(("a", "b", "c"), rng.integers(0, 40, int(lengths.sum())), lengths)


@pytest.mark.parametrize("pooling", ["mean", "max"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_jagged_bags_pool_per_feature_in_every_model(name, pooling, make_tables, rng):
    model = build(name, 3, make_tables(F, D), seed=2, pooling=pooling)
    feats, dense = jagged(rng), rng.standard_normal((B, 3)).astype(np.float32)
    model.eval()
    embedded = model.embed(feats)
    for f, t in enumerate(model.embeddings.tables):
        keys, offsets, _ = feats.feature(f)
        for b in range(B):
            bag = keys[offsets[b]:offsets[b + 1]]
            rows = t.lookup(bag, insert=False).data if bag.size else np.zeros((1, D), np.float32)
            want = rows.mean(0) if pooling == "mean" else rows.max(0)
            np.testing.assert_allclose(embedded[0].data[b, f], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(model(dense, feats).data, model.head(dense, *embedded).data, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_step_on_jagged_input_moves_exactly_the_rows_of_its_keys(name, make_tables, rng):
    model = build(name, 3, make_tables(F, D), seed=3)
    feats, dense = jagged(rng), rng.standard_normal((B, 3)).astype(np.float32)
    with no_grad():
        model(dense, feats)  # inserts every key, so the rows before the step can be read
    before = [t.lookup(np.arange(40), insert=False).data.copy() for t in model.embeddings.tables]
    y = model(dense, feats)
    (y * y).sum().backward()  # the tables update their rows in the backward
    for f, (t, rows) in enumerate(zip(model.embeddings.tables, before)):
        moved = np.flatnonzero(np.abs(t.lookup(np.arange(40), insert=False).data - rows).max(1) > 0)
        assert set(moved) == set(feats.feature(f)[0].tolist()), (f, moved)
