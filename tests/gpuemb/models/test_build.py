"""The models' interface: build by name, shapes, seeds, table configs, and errors that name what was wrong."""
import dataclasses

import numpy as np
import pytest

from gpuemb.autograd import Tensor, no_grad
from gpuemb.kernels.embedding_bag import EmbeddingBagFunction
from gpuemb.models import MODELS, build
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import StoreOptions

N_DENSE, F, D, B = 4, 5, 8, 6


def batch(rng, n_dense=N_DENSE):
    return rng.standard_normal((B, n_dense)).astype(np.float32), rng.integers(0, 50, (B, F))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_per_task(name, make_tables, rng):
    model = build(name, N_DENSE, make_tables(F, D))
    y = model(*batch(rng))
    assert y.shape == ((B,) if model.n_tasks == 1 else (B, model.n_tasks))
    assert y.requires_grad and np.all(np.isfinite(y.numpy())) and np.std(y.numpy()) > 0


def graph_leaves(y):
    """The leaf Tensors that require a gradient in the tape behind ``y``, but for the tables' gathered rows."""
    leaves, seen, stack = {}, set(), [y.creator]
    while stack:
        fn = stack.pop()
        if id(fn) in seen or isinstance(fn, EmbeddingBagFunction):
            continue
        seen.add(id(fn))
        for x in fn.inputs:
            if isinstance(x, Tensor) and x.requires_grad:
                if x.creator is None:
                    leaves[id(x)] = x
                else:
                    stack.append(x.creator)
    return leaves


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_trainable_tensor_is_a_parameter(name, make_tables, rng):
    """A weight kept where the attribute walk cannot see it (say, a list of Tensors) would never be trained."""
    model = build(name, N_DENSE, make_tables(F, D))
    y = model(*batch(rng))
    assert set(graph_leaves(y)) == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_shared_table(name, make_tables, rng):
    model = build(name, N_DENSE, make_tables(1, D)[0], n_features=F)
    dense, sparse = batch(rng)
    with no_grad():
        assert model(dense, sparse).shape[0] == B
    assert len(model.embeddings.tables) == 1 and model.embeddings.n_features == F


@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_seed_same_model_bit_for_bit(name, make_tables, rng):
    a, b, c = (build(name, N_DENSE, make_tables(F, D), seed=s) for s in (7, 7, 8))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys() == sc.keys() and sa
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key])
    assert all(not np.array_equal(sa[key], sc[key]) for key in sa if np.any(sa[key]))
    dense, sparse = batch(rng)
    np.testing.assert_array_equal(a(dense, sparse).numpy(), b(dense, sparse).numpy())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_table_names_are_distinct_across_collections(name, make_tables):
    model = build(name, N_DENSE, make_tables(F, D))
    names = [t.config.name for m in model.modules() if isinstance(m, EmbeddingCollection) for t in m.tables]
    assert len(names) == len(set(names)) == F * (2 if model.first_order else 1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unknown_hyperparameter_names_the_model_and_the_valid_ones(name, make_tables):
    with pytest.raises(TypeError, match=rf"{type(build(name, N_DENSE, make_tables(F, D))).__name__}: unknown "
                                        r"hyperparameter\(s\) widht; valid ones are .*n_features"):
        build(name, N_DENSE, make_tables(F, D), widht=3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bad_dense_and_sparse_shapes(name, make_tables, rng):
    model = build(name, N_DENSE, make_tables(F, D))
    dense, sparse = batch(rng)
    with pytest.raises(ValueError, match=r"dense has shape \(6, 3\); want \[B, n_dense\] = \[6, 4\]"):
        model(dense[:, :3], sparse)
    with pytest.raises(ValueError, match="this collection has 5 features"):
        model(dense, sparse[:, :4])


def test_unknown_model_and_bad_tables(make_tables):
    with pytest.raises(ValueError, match="unknown model 'dlrn'; use one of dlrm"):
        build("dlrn", N_DENSE, make_tables(F, D))
    with pytest.raises(ValueError, match="pass n_features=F"):
        build("dlrm", N_DENSE, make_tables(1, D)[0])
    with pytest.raises(ValueError, match="drop n_features"):
        build("dlrm", N_DENSE, make_tables(F, D), n_features=F)
    with pytest.raises(ValueError, match=r"table names \['t0'\] are repeated"):
        build("dlrm", N_DENSE, make_tables(F, D) + make_tables(1, D))
    with pytest.raises(ValueError, match=r"table names \['t0_linear'\] are repeated \(first-order tables add"):
        build("deepfm", N_DENSE, make_tables(F, D) + [dataclasses.replace(make_tables(1, D)[0], name="t0_linear")])
    with pytest.raises(ValueError, match="n_features=0; use an int >= 1"):
        build("dlrm", N_DENSE, make_tables(1, D)[0], n_features=0)
    assert build("dlrm", N_DENSE, make_tables(1, D), n_features=F).embeddings.n_features == F
    with pytest.raises(ValueError, match="n_dense=-1; use an int >= 0"):
        build("dlrm", -1, make_tables(F, D))


@pytest.mark.parametrize("name, hyper, message", [
    ("dlrm", {"top": (64, 0)}, r"DLRM: top=\(64, 0\); use a tuple of layer widths"),
    ("dlrm", {"bottom": 64}, "DLRM: bottom=64; use a tuple of layer widths"),
    ("dlrm", {"dropout": 1.0}, r"DLRM: dropout=1.0; use a dropout probability in \[0, 1\)"),
    ("dlrm", {"self_interaction": "yes"}, "DLRM: self_interaction='yes'; use True or False"),
    ("dcn", {"structure": "mixed"}, "DCNv2: structure='mixed'; use one of stacked, parallel"),
    ("dcn", {"rank": 0}, "DCNv2: rank=0; use an int >= 1 or None"),
    ("dcn", {"n_cross": 0}, "DCNv2: n_cross=0; use an int >= 1"),
    ("dcn", {"bottom": ()}, r"DCNv2: bottom=\(\); use a non-empty tuple of layer widths"),
    ("dcn", {"bottom": 128}, "DCNv2: bottom=128; use a non-empty tuple of layer widths"),
    ("deepfm", {"deep": [64, -1]}, r"DeepFM: deep=\[64, -1\]; use a tuple of layer widths"),
    ("xdeepfm", {"cin": ()}, r"XDeepFM: cin=\(\); use a non-empty tuple of layer widths"),
    ("pnn", {"dropout": -0.1}, "PNN: dropout=-0.1; use a dropout probability"),
    ("wide_deep", {"deep": (8.5,)}, r"WideDeep: deep=\(8.5,\); use a tuple of layer widths"),
    ("mmoe", {"n_tasks": 0}, "MMoE: n_tasks=0; use an int >= 1"),
    ("mmoe", {"expert": ()}, r"MMoE: expert=\(\); use a non-empty tuple of layer widths"),
])
def test_bad_hyperparameters_name_the_model_the_key_and_what_to_use(name, hyper, message, make_tables):
    with pytest.raises(ValueError, match=message):
        build(name, N_DENSE, make_tables(F, D), **hyper)


def test_pnn_needs_two_fields(make_tables):
    with pytest.raises(ValueError, match="PNN: 1 field; its products need at least two"):
        build("pnn", 0, make_tables(1, D))
    assert build("pnn", 1, make_tables(1, D)).deep.layers[0].weight.shape == (256, 2 * D + 1)


def test_dcn_forms_and_structures(make_tables):
    d = F * D + N_DENSE
    full = build("dcn", N_DENSE, make_tables(F, D), n_cross=2)
    assert [layer.weight.shape for layer in full.cross] == [(d, d)] * 2 and full.deep.layers[0].weight.shape[1] == d
    low = build("dcn", N_DENSE, make_tables(F, D), rank=3, structure="parallel", deep=(16,))
    assert [(layer.u.shape, layer.v.shape) for layer in low.cross] == [((d, 3), (d, 3))] * 3
    assert low.out.weight.shape == (1, d + 16)
    # a bottom MLP's output takes the dense features' place in x0; without one the model is as before
    bottom = build("dcn", N_DENSE, make_tables(F, D), rank=3, bottom=(8, 5))
    assert [layer.weight.shape for layer in bottom.bottom.layers] == [(8, N_DENSE), (5, 8)]
    assert bottom.cross[0].u.shape == (F * D + 5, 3) and bottom.deep.layers[0].weight.shape[1] == F * D + 5
    assert full.bottom is None
    with pytest.raises(ValueError, match="DCNv2: bottom=\\(8,\\); a bottom MLP reads the dense features"):
        build("dcn", 0, make_tables(F, D), bottom=(8,))


def test_mmoe_tasks_and_experts(make_tables, rng):
    model = build("mmoe", N_DENSE, make_tables(F, D), n_tasks=3, n_experts=5, expert=(12, 6), tower=())
    assert model.n_tasks == 3 and len(model.experts) == 5 and len(model.towers) == 3
    assert model.gates[0].weight.shape == (5, F * D + N_DENSE) and model.towers[0].layers[0].weight.shape == (1, 6)
    with no_grad():
        assert model(*batch(rng)).shape == (B, 3)
        assert build("mmoe", N_DENSE, make_tables(F, D), n_tasks=1)(*batch(rng)).shape == (B,)


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"dlrm"}))
def test_data_without_dense_features(name, make_tables, rng):
    model = build(name, 0, make_tables(F, D))
    dense, sparse = batch(rng, n_dense=0)
    model(dense, sparse).sum().backward()  # the backward runs the tables' row updates too
    assert all(p.grad is not None for p in model.parameters())


def test_dlrm_needs_dense_features(make_tables):
    with pytest.raises(ValueError, match="DLRM: n_dense=0; its bottom MLP needs dense features"):
        build("dlrm", 0, make_tables(F, D))


def test_dlrm_bottom_mlp_ends_at_the_embedding_dim(make_tables):
    model = build("dlrm", N_DENSE, make_tables(F, D), bottom=(32, 16))
    assert [layer.weight.shape for layer in model.bottom.layers] == [(32, N_DENSE), (16, 32), (D, 16)]
    assert model.top.layers[0].weight.shape[1] == 24  # D + the 15 pairs of 6 vectors, padded to a multiple of 8


@pytest.mark.parametrize("name", sorted(n for n in MODELS if MODELS[n].first_order))
def test_first_order_tables_follow_the_configs(name, make_tables, tmp_path, rng):
    ssd = StoreOptions("ssd", cache_rows=64, ssd_path=str(tmp_path / "t0.h5"))
    configs = make_tables(F, D)
    configs[0] = make_tables(1, D, options=ssd)[0]
    model = build(name, N_DENSE, configs)
    linear = model.linear_embeddings.tables[0].config
    assert (linear.name, linear.dim, linear.initializer.kind) == ("t0_linear", 1, "zeros")
    assert linear.options.ssd_path == str(tmp_path / "t0.linear.h5") and linear.rule == configs[0].rule
    with no_grad():
        model(*batch(rng))
    assert sorted(p.name for p in tmp_path.glob("*.h5")) == ["t0.h5", "t0.linear.h5"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_multi_hot_features_pool_by_the_models_setting(name, make_tables, rng):
    """With ``hotness``, every model sees one pooled row per feature: its logits equal those it gives on the same
    rows pooled by hand (the mean of each feature's rows, fed as single-hot input through the head)."""
    hot = (2, 1, 3)
    model = build(name, 3, make_tables(3, 4), seed=1, hotness=hot, pooling="mean")
    assert model.embeddings.hotness == hot and model.embeddings.mode == "mean"
    if model.first_order:
        assert model.linear_embeddings.mode == "sum"
    sparse, dense = rng.integers(0, 50, (6, sum(hot))), rng.standard_normal((6, 3)).astype(np.float32)
    model.eval()
    embedded = model.embed(sparse)
    ends = np.cumsum(hot)
    for f, t in enumerate(model.embeddings.tables):
        rows = t.lookup(sparse[:, ends[f] - hot[f]:ends[f]].reshape(-1), insert=False).data.reshape(6, hot[f], 4)
        np.testing.assert_allclose(embedded[0].data[:, f], rows.mean(1), rtol=1e-6)
    np.testing.assert_allclose(model(dense, sparse).data, model.head(dense, *embedded).data, rtol=1e-6)
    with pytest.raises(ValueError, match="pooling='median'; use one of sum, mean"):
        build(name, 3, make_tables(3, 4), hotness=hot, pooling="median")
