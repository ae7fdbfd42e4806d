"""Tables of different dims: the models that put the rows side by side into an MLP (DCN-v2, Wide&Deep, MMoE)
take them, and see each sample's rows concatenated; those whose interaction needs one dim refuse them in one line."""
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.models import build
from gpuemb.optim import AdagradRule
from gpuemb.store import TableConfig

DIMS, B = (4, 8, 2), 6
HYPER = {"dcn": {"n_cross": 2, "deep": (8,)}, "wide_deep": {"deep": (8,)},
         "mmoe": {"n_experts": 2, "expert": (8,), "tower": (4,)}}


def _tables():
    return [TableConfig(f"t{i}", d, rule=AdagradRule(), lr=0.1) for i, d in enumerate(DIMS)]


@pytest.mark.parametrize("name", sorted(HYPER))
def test_concatenating_models_take_tables_of_several_dims(name, rng):
    model = build(name, 3, _tables(), seed=2, **HYPER[name])
    assert model.embeddings.dim is None and model.embeddings.width == sum(DIMS)
    sparse, dense = rng.integers(0, 1 << 40, (B, len(DIMS))), rng.standard_normal((B, 3)).astype(np.float32)
    out = model(dense, sparse)
    out.sum().backward()
    assert all(len(t) == B for t in model.embeddings.tables)  # every table trained its keys
    model.eval()
    flat = to_host(model.embeddings(sparse).data)
    want = np.concatenate([to_host(t.lookup(sparse[:, f], insert=False).data)
                           for f, t in enumerate(model.embeddings.tables)], axis=1)
    np.testing.assert_array_equal(flat, want)  # each sample's rows side by side, table after table
    assert flat.shape == (B, sum(DIMS))
    np.testing.assert_allclose(to_host(model(dense, sparse).data),
                               to_host(model.head(dense, *model.embed(sparse)).data))


def test_mixed_dims_pass_the_gradient_check(head_gradcheck, rng):
    model = build("dcn", 3, _tables(), seed=1, **HYPER["dcn"])
    assert head_gradcheck(model, [rng.standard_normal((4, 3)), rng.standard_normal((4, sum(DIMS)))]) > 0


@pytest.mark.parametrize("name, what", [("dlrm", "dot interaction"), ("deepfm", "FM"), ("xdeepfm", "CIN"),
                                        ("pnn", "inner products")])
def test_models_whose_interaction_needs_one_dim_refuse_several(name, what):
    with pytest.raises(ValueError, match=rf"tables of dims \[2, 4, 8\]; its {what}.*needs one dim"):
        build(name, 3, _tables())


def test_a_bundle_and_a_world_of_one_take_several_dims(tmp_path, rng):
    """Exported and distributed, a model of several dims gives its own eval output (the full checks of each are in
    tests/gpuemb/serve and tests/gpuemb/distributed)."""
    from gpuemb.comm import LocalCommunicator
    from gpuemb.distributed import distribute
    from gpuemb.serve import Predictor
    from gpuemb.serve.bundle import write_bundle

    model = build("dcn", 3, _tables(), seed=3, **HYPER["dcn"])
    sparse, dense = rng.integers(0, 1 << 40, (B, len(DIMS))), rng.standard_normal((B, 3)).astype(np.float32)
    model(dense, sparse).sum().backward()
    model.eval()
    want = to_host(model(dense, sparse).data)
    write_bundle(model, tmp_path / "b")
    with Predictor(tmp_path / "b", runtime="numpy") as p:
        np.testing.assert_allclose(p.predict(dense, sparse), want, rtol=1e-5, atol=1e-6)
    whole, sharded = (build("dcn", 3, _tables(), seed=3, **HYPER["dcn"]) for _ in range(2))
    distribute(sharded, LocalCommunicator())  # before training, as a run distributes its model
    assert sharded.embeddings.width == sum(DIMS)
    for m in (whole, sharded):
        m(dense, sparse).sum().backward()  # the rows' update is in the backward
        m.eval()
    np.testing.assert_allclose(to_host(sharded(dense, sparse).data), to_host(whole(dense, sparse).data),
                               rtol=1e-5, atol=1e-6)
