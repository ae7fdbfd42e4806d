"""Run presets (``--preset mlperf-dcnv2``): a whole configuration under the config file's and the flags'."""
import pytest

from gpuemb.io import synthetic
from gpuemb.train import TrainConfig
from gpuemb.train.errors import ConfigError
from gpuemb.train.recipes import RUN_PRESETS


def test_every_run_preset_names_its_synthetic_data_and_only_real_settings():
    for name, preset in RUN_PRESETS.items():
        assert name in synthetic.PRESETS
        TrainConfig.of(preset=name)  # every setting a valid key and value


def test_the_mlperf_preset_fills_what_is_not_given():
    c = TrainConfig.of(preset="mlperf-dcnv2")
    assert (c.model.name, c.model.embedding_dim, c.model.tables) == ("dcn", 128, "per-feature")
    assert c.model.args == {"bottom": [512, 256, 128], "n_cross": 3, "rank": 512, "deep": [1024, 1024, 512, 256]}
    assert (c.optimization.embedding_optimizer, c.optimization.optimizer) == ("adagrad", "adagrad")
    assert max(synthetic.PRESETS["mlperf-dcnv2"].cardinalities) == synthetic.MLPERF_CAP
    assert synthetic.PRESETS["mlperf-dcnv2"].hotness == synthetic.MLPERF_HOTNESS


def test_given_settings_win_and_model_args_add_up():
    c = TrainConfig.of(preset="mlperf-dcnv2", embedding_dim=64, batch_size=32, model_args={"dropout": 0.1})
    assert c.model.embedding_dim == 64 and c.optimization.batch_size == 32
    assert c.model.args["dropout"] == 0.1 and c.model.args["rank"] == 512


def test_another_model_drops_the_presets_hyperparameters_and_epochs_its_steps():
    c = TrainConfig.of(preset="mlperf-dcnv2", model="dlrm", epochs=1)
    assert c.model.name == "dlrm" and c.model.args == {} and c.model.embedding_dim == 128
    assert c.optimization.steps is None and c.optimization.epochs == 1


def test_a_config_file_and_flags_sit_over_the_preset(tmp_path):
    (tmp_path / "run.toml").write_text("preset = 'mlperf-dcnv2'\nembedding_lr = 0.01\n")
    c = TrainConfig.from_file(tmp_path / "run.toml", {"steps": 7})
    assert c.model.name == "dcn" and c.optimization.embedding_lr == 0.01 and c.optimization.steps == 7


def test_replace_keeps_the_settings_it_was_given():
    c = TrainConfig.of(preset="mlperf-dcnv2").replace(embedding_dim=8)
    assert c.model.embedding_dim == 8 and c.model.name == "dcn"


def test_the_preset_is_synthetic_data_only(tmp_path):
    with pytest.raises(ConfigError, match="--preset: shapes synthetic data"):
        TrainConfig.of(preset="mlperf-dcnv2", data=str(tmp_path))
