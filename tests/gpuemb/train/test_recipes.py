"""Per-model recipes: what a run trains with when its flags leave a setting unset, and that flags always win."""
import pytest

from gpuemb.train import recipes
from gpuemb.train.config import TrainConfig
from gpuemb.train.data import uses_synthetic
from gpuemb.train.model import table_configs


def resolved(synthetic=True, **values):
    return recipes.apply(TrainConfig.of(**values), synthetic)


def test_a_model_without_a_recipe_gets_the_shared_defaults():
    c = resolved(model="dlrm")
    assert (c.optimization.embedding_lr, c.optimization.embedding_init, c.optimization.embedding_init_scale,
            c.optimization.steps) == (recipes.EMBEDDING_LR, "uniform", None, recipes.STEPS)


@pytest.mark.parametrize("model", ["deepfm", "xdeepfm"])
def test_the_fm_models_start_from_small_rows_at_a_lower_lr(model):
    c = resolved(model=model)
    assert (c.optimization.embedding_lr, c.optimization.embedding_init, c.optimization.embedding_init_scale) == (
        0.05, "normal", 0.01)
    assert c.optimization.embedding_lr < recipes.EMBEDDING_LR


@pytest.mark.parametrize("model", ["dcn", "dlrm", "pnn"])
def test_multi_hot_synthetic_data_starts_from_small_rows(model):
    c = resolved(model=model, preset="multihot")
    assert (c.optimization.embedding_lr, c.optimization.embedding_init, c.optimization.embedding_init_scale) == (
        0.05, "normal", 0.01)
    assert resolved(model=model, preset="multihot", embedding_lr=0.2).optimization.embedding_lr == 0.2  # flags win
    assert resolved(synthetic=False, model=model, preset="multihot").optimization.embedding_lr == recipes.EMBEDDING_LR
    assert resolved(model="dcn", preset="multihot").optimization.steps == 2400
    assert resolved(model="pnn", preset="multihot").optimization.steps == 1000  # the model's entries win


def test_flags_win_over_the_recipe():
    c = resolved(model="deepfm", embedding_lr=0.3, embedding_init="uniform", embedding_init_scale=0.5, steps=7)
    assert (c.optimization.embedding_lr, c.optimization.embedding_init, c.optimization.embedding_init_scale,
            c.optimization.steps) == (0.3, "uniform", 0.5, 7)


def test_the_recipes_step_count_applies_to_synthetic_data_only():
    assert resolved(model="pnn").optimization.steps == 1000
    assert resolved(model="pnn", epochs=2).optimization.steps is None  # the epochs decide
    assert resolved(synthetic=False, model="pnn").optimization.steps is None  # real data: an epoch, decided by run.py


def test_applying_twice_changes_nothing():
    c = resolved(model="xdeepfm")
    assert recipes.apply(c, True) == c


def test_which_configs_train_on_synthetic_data():
    assert uses_synthetic(TrainConfig.of())
    assert uses_synthetic(TrainConfig.of(data="synthetic"))
    assert not uses_synthetic(TrainConfig.of(model="mmoe"))  # census-income by default
    assert not uses_synthetic(TrainConfig.of(data="shards/"))


def test_the_tables_are_drawn_the_way_the_config_says():
    class Data:
        sparse_names = ["c0", "c1"]

    c = resolved(model="deepfm", tables="per-feature", seed=5)
    inits = {t.initializer for t in table_configs(c, Data())}
    assert len(inits) == 1
    init = inits.pop()
    assert (init.kind, init.scale, init.seed) == ("normal", 0.01, 5)
    assert table_configs(c, Data())[0].lr == 0.05
