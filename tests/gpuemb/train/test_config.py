"""TrainConfig from dicts, files and flags: the values land in the right fields, and each mistake names its key."""
import json

import pytest

from gpuemb.train.cli import parse_config
from gpuemb.train.config import TrainConfig, as_it_ran, check_precision, resume_differences
from gpuemb.train.errors import ConfigError


def test_defaults_check_themselves_and_round_trip_through_a_dict():
    c = TrainConfig.of()
    assert (c.model.name, c.store.placement, c.optimization.precision, c.model.tables) == (
        "dlrm", "device", "fp32", "shared")
    assert TrainConfig.from_dict(c.to_dict()) == c
    assert json.loads(json.dumps(c.to_dict())) == c.to_dict()  # a checkpoint records it as JSON


def test_a_toml_file_with_flag_style_keys_then_flags_on_top(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('model = "dcn"\nbatch-size = 512\nlr = 1\nembedding_lr = 0.05\nno-progress = true\n'
                    '[model_args]\nn_cross = 2\ndeep = [64, 32]\n')
    c = parse_config(["--config", str(path), "--batch-size", "256", "--model-arg", "rank=4"])
    assert (c.model.name, c.optimization.batch_size, c.optimization.lr, c.optimization.embedding_lr,
            c.output.progress) == ("dcn", 256, 1.0, 0.05, False)
    assert c.model.args == {"n_cross": 2, "deep": [64, 32], "rank": 4}  # the file's and the flag's, merged
    assert isinstance(c.optimization.lr, float)


def test_a_json_file_gives_the_same_config_as_flags(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"steps": 30, "schedule": "cosine", "warmup_steps": 5, "resume": True,
                                "checkpoint_dir": "ck", "label": "y", "data": "x.csv", "format": "csv"}))
    flags = ["--steps", "30", "--schedule", "cosine", "--warmup-steps", "5", "--resume", "--checkpoint-dir", "ck",
             "--label", "y", "--data", "x.csv", "--format", "csv"]
    assert parse_config(["--config", str(path)]) == parse_config(flags)
    assert parse_config(flags).checkpoints.resume == "latest" and parse_config(flags).data.label == ["y"]


@pytest.mark.parametrize("values,message", [
    ({"batch_size": 0}, "--batch-size: 0 is below 1"),
    ({"lr": float("nan")}, "--lr: nan is not a finite number"),
    ({"lr": "fast"}, "--lr: 'fast' is not a finite number"),
    ({"steps": 2.5}, "--steps: 2.5 is not an integer"),
    ({"model": "bert"}, "--model: 'bert' is not one of dlrm"),
    ({"progress": "yes"}, "--no-progress: 'yes' is not true or false"),
    ({"batchsize": 4}, "unknown key 'batchsize' (did you mean --batch-size?)"),
    ({"steps": 5, "epochs": 1}, "--epochs: give --steps or --epochs, not both"),
    ({"store": "ssd"}, "--cache-rows: placement='ssd' computes on device rows"),
    ({"cache_rows": 10}, "--cache-rows: cache_rows and host_cache_rows cache a host or ssd placement"),
    ({"store": "host", "cache_rows": 10, "host_cache_rows": 5}, "--host-cache-rows: host_cache_rows caches an ssd "
                                                               "placement"),
    ({"ssd_dir": "x"}, "--ssd-dir: ssd_path is the file of placement='ssd' and only of it"),
    ({"format": "criteo"}, "--format: reads raw files; give their paths with --data"),
    ({"data": "x.csv", "format": "csv"}, "--label: --format csv needs the label column"),
    ({"label": ["y"]}, "--label: names columns of --format csv or parquet files only"),
    ({"data": "shards", "preset": "small"}, "--preset: shapes synthetic data"),
    ({"step_size": 10}, "--step-size: does not apply to --schedule constant; it sets step"),
    ({"schedule": "step"}, "--step-size: --schedule step needs --step-size"),
    ({"resume": "latest"}, "--resume: 'latest' is looked up in --checkpoint-dir"),
    ({"checkpoint_every": 10}, "--checkpoint-every: needs --checkpoint-dir"),
    ({"eval_fraction": 1.0}, "--eval-fraction: 1.0; hold out a fraction strictly between 0 and 1"),
])
def test_each_mistake_names_its_key(values, message):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(values)
    assert message in str(e.value)
    assert e.value.exit_code == 2


@pytest.mark.parametrize("text,name,message", [
    ("steps = 10\nbogus = 1\n", "a.toml", "a.toml: unknown key 'bogus'"),
    ("steps = \n", "b.toml", "b.toml: is not valid TOML"),
    ('{"steps": 10,}', "c.json", "c.json: is not valid JSON"),
    ("[1, 2]", "d.json", "d.json: holds a list"),
    ("steps = 10\n", "e.yaml", "name a .toml or .json file"),
    ('steps = "ten"\n', "f.toml", "--steps: 'ten' is not an integer"),
])
def test_a_bad_config_file_is_a_config_error_naming_it(tmp_path, text, name, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_file(path)
    assert message in str(e.value)


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nowhere.toml: cannot be read"):
        TrainConfig.from_file(tmp_path / "nowhere.toml")


def test_reduced_precision_is_refused_on_the_cpu_only():
    check_precision("fp32", "cpu")
    for precision in ("fp16", "bf16"):
        with pytest.raises(ConfigError, match=f"{precision} runs on a GPU only.*use --precision fp32, or run on a GPU"):
            check_precision(precision, "cpu")
        check_precision(precision, "cuda")


def test_embedding_dtype_takes_fp32_or_fp16():
    assert (TrainConfig.of().store.embedding_dtype == "fp32"
            and TrainConfig.of(embedding_dtype="fp16").store.embedding_dtype == "fp16")
    with pytest.raises(ConfigError, match="--embedding-dtype: 'bf16' is not one of fp32, fp16"):
        TrainConfig.of(embedding_dtype="bf16")


def test_a_resume_may_change_how_long_and_what_it_writes_but_not_what_it_computes():
    saved = TrainConfig.of(steps=10).to_dict()
    assert resume_differences(saved, TrainConfig.of(steps=20, eval_every=5, metrics_out="m.jsonl")) == []
    diff = resume_differences(saved, TrainConfig.of(steps=20, embedding_dim=8, model="dcn"))
    assert [(k, a, b) for k, a, b in diff] == [("model", "dlrm", "dcn"), ("embedding_dim", 16, 8)]


def test_a_checkpoint_from_before_the_draw_setting_ran_draw_1_and_a_resume_says_so():
    saved = TrainConfig.of(steps=10).to_dict()
    del saved["optimization"]["embedding_init_draw"]  # as a checkpoint written before the setting holds it
    assert as_it_ran(saved)["embedding_init_draw"] == 1 and as_it_ran(TrainConfig.of().to_dict())[
        "embedding_init_draw"] == 2 == TrainConfig.of().optimization.embedding_init_draw
    assert resume_differences(saved, TrainConfig.of(steps=20)) == [("embedding_init_draw", 1, 2)]
    assert resume_differences(saved, TrainConfig.of(steps=20, embedding_init_draw=1)) == []
    with pytest.raises(ConfigError, match="--embedding-init-draw: 3 is above 2"):
        TrainConfig.of(embedding_init_draw=3)


def test_a_table_config_saved_before_draws_builds_a_draw_1_initializer():
    from gpuemb.store.options import Initializer, TableConfig
    config = TableConfig("t", 4, initializer=Initializer("normal", 0.5, 7))
    d = config.to_dict()
    assert d["initializer"]["draw"] == 2 and TableConfig.from_dict(d) == config
    del d["initializer"]["draw"]
    assert TableConfig.from_dict(d).initializer == Initializer("normal", 0.5, 7, draw=1)


def test_a_run_refuses_reduced_precision_on_the_cpu_before_building_anything():
    from gpuemb.autograd import backend
    from gpuemb.train.errors import ConfigError
    from gpuemb.train.run import Run
    if backend.DEVICE != "cpu":
        pytest.skip("checks the CPU's refusal; this backend is " + backend.DEVICE)
    with pytest.raises(ConfigError, match="--precision: fp16 runs on a GPU only"):
        Run(TrainConfig.of(precision="fp16"))


@pytest.mark.parametrize("flag, section, key", [("--phase-times", "output", "phase_times"),
                                                ("--soft-labels", "data", "soft_labels"),
                                                ("--no-progress", "output", "progress")])
def test_a_bool_flag_turns_its_default_over_and_a_config_file_sets_it_too(tmp_path, flag, section, key):
    default = getattr(getattr(parse_config([]), section), key)
    assert getattr(getattr(parse_config([flag]), section), key) is (not default)
    path = tmp_path / "run.toml"
    path.write_text(f"{key} = {str(not default).lower()}\n")
    assert getattr(getattr(parse_config(["--config", str(path)]), section), key) is (not default)
