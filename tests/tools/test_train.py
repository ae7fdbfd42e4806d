"""tools/train.py as a user runs it: a subprocess, its exit code and what it prints."""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from gpuemb import models
from gpuemb.autograd import backend

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = ROOT / "tools" / "train.py"
CRITEO = ROOT / "tests" / "io" / "data" / "criteo_sample.tsv"
CENSUS = ROOT / "tests" / "io" / "data" / "census_income_sample.csv"
SHORT = ["--steps", "3", "--batch-size", "256", "--eval-rows", "2000", "--no-progress"]
ALL_MODELS = ("dlrm", "dcn", "deepfm", "xdeepfm", "pnn", "wide_deep", "mmoe")


def train(*args, device="cpu", **env_vars):
    env = {**os.environ, "GPUEMB_DEVICE": device, **env_vars}
    return subprocess.run([sys.executable, str(TRAIN), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def summary(out):
    """(AUC, log-loss) of the last line, which sums the run up."""
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    found = re.search(r"^done: .* eval AUC ([\d.]+).*log-loss ([\d.]+)", last)
    assert found, out.stdout
    return tuple(map(float, found.groups()))


@pytest.mark.parametrize("model", ALL_MODELS)
def test_a_short_run_of_each_model(model):
    if model not in models.MODELS:
        pytest.skip(f"gpuemb.models has no {model!r} yet")
    # The census sample has fewer rows than the others' batch: MMoE takes its default batch size.
    short = [a for a in SHORT if a not in ("--batch-size", "256")] if model == "mmoe" else SHORT
    out = train("--model", model, *short)
    auc, log_loss = summary(out)
    assert 0 < auc < 1 and 0 < log_loss < 5
    if model == "mmoe":  # census-income's two tasks, each with its AUC
        assert "census files" in out.stdout and re.search(r"\(tasks [\d.]+, [\d.]+\)", out.stdout)
    else:
        assert "teacher" in out.stdout.splitlines()[-1]


def test_link_models_the_wire_and_its_records_say_so(tmp_path):
    path = tmp_path / "metrics.jsonl"
    summary(train(*SHORT, "--steps", "2", "--log-every", "2", "--link", "ib100", "--metrics-out", path))
    record = [json.loads(line) for line in path.read_text().splitlines() if '"train"' in line][-1]
    # one process puts nothing on the link; the record still says which link it ran over
    assert record["link"]["link"] == "ib100" and record["link"]["modelled_s"] == 0


def test_metrics_out_writes_json_lines_of_train_and_eval_records(tmp_path):
    path = tmp_path / "m" / "metrics.jsonl"
    out = train(*SHORT, "--steps", "4", "--log-every", "2", "--eval-every", "2", "--metrics-out", path)
    summary(out)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [(r["kind"], r["step"]) for r in records]
    assert kinds == [("train", 2), ("eval", 2), ("train", 4), ("eval", 4)]
    assert all(r["loss"] > 0 and r["samples_per_s"] > 0 for r in records if r["kind"] == "train")
    assert all(0 < r["auc"] < 1 and r["rows"] == 2000 and 0.5 < r["teacher_auc"] < 1
               for r in records if r["kind"] == "eval")
    # what a step paid a device for: nothing on the CPU, whose numba kernels are not device launches
    nothing = {"numba": 0, "cupy": 0, "cublaslt": 0, "readbacks": 0, "by_phase": {}}
    assert all(r["launches"] == nothing and r["transfers"]["to_host"] == 0 for r in records if r["kind"] == "train")


def test_the_criteo_sample_converts_splits_and_trains_end_to_end():
    out = train("--data", CRITEO, "--format", "criteo", "--eval-fraction", "0.3", "--steps", "5", "--no-progress")
    summary(out)
    found = re.search(r"criteo files .* \((\d+) train, (\d+) eval rows", out.stdout)
    assert found and sum(map(int, found.groups())) == 200 and int(found.group(2)) > 20, out.stdout


def test_resuming_with_another_model_shape_names_the_field(tmp_path):
    summary(train(*SHORT, "--checkpoint-dir", tmp_path))
    assert (tmp_path / "latest").is_file()
    out = train(*SHORT, "--steps", "5", "--checkpoint-dir", tmp_path, "--resume", "--embedding-dim", "8")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--embedding-dim was 16, now 8" in out.stderr and len(out.stderr.splitlines()) == 1


@pytest.mark.skipif(backend.real_gpu(), reason="this machine has a GPU, so --device cuda works")
def test_cuda_without_gpu_is_a_short_message():
    out = train("--steps", "1", device="cuda")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "no GPU can be used" in out.stderr and len(out.stderr.splitlines()) == 1


def bad_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return ["--config", path]


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--steps", "0"], "--steps: 0 is below 1"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--store", "ssd"], "--cache-rows: placement='ssd' computes on device rows"),
    (["--precision", "fp16"], "--precision: fp16 runs on a GPU only"),
    (["--data", CENSUS, "--format", "census"], "predicts 1 task(s), but the data has 2 label column(s)"),
    (lambda t: bad_file(t, "a.toml", "steps = 10\nbatch_sise = 3\n"), "unknown key 'batch_sise'"),
    (lambda t: bad_file(t, "c.toml", "steps = [\n"), "c.toml: is not valid TOML"),
    (lambda t: ["--config", t / "missing.toml"], "missing.toml: cannot be read"),
    (["--table-dim", "C3=32"], "--table-dim: gives features dims of their own, which needs a table per feature; "
                               "add --tables per-feature"),
    (["--tables", "per-feature", "--table-dim", "C3=0"], "--table-dim: C3=0; give each feature's dim as an int >= 1"),
    (["--tables", "per-feature", "--table-dim", "C3=wide"], "--table-dim: C3='wide'; give each feature's dim"),
    (["--tables", "per-feature", "--table-dim", "C99=8", "--steps", "1"], "the data has no sparse feature 'C99'"),
    (["--tables", "per-feature", "--table-dim", "C3=32", "--steps", "1"],
     "--table-dim: --model dlrm's dot interaction needs one dim for every table; drop --table-dim, or use a model "
     "that concatenates the rows (dcn, wide_deep, mmoe)"),
    (["--link", "ib50"], "argument --link: 'ib50' is not a link; use one of none, ib100, ib400, nvlink4"),
    (lambda t: bad_file(t, "l.toml", 'link = "1:0"\n'), "--link: '1:0' is not a link"),
    (["--link", "ib100", "--local-link", "warp"], "argument --local-link: 'warp' is not a link; use one of none"),
    (lambda t: bad_file(t, "ll.toml", 'link = "ib100"\nlocal_link = "1:0"\n'), "--local-link: '1:0' is not a link"),
    (["--local-link", "nvlink4"], "argument --local-link: nvlink4 is the link within a host, and there is no --link "
                                  "between hosts; give --link too"),
], ids=["flag", "value", "choice", "ssd-cache", "fp16", "tasks", "file-key", "file-syntax", "file-missing",
        "table-dim-shared", "table-dim-zero", "table-dim-text", "table-dim-name", "table-dim-dlrm", "link",
        "link-file", "local-link", "local-link-file", "local-link-alone"])
def test_bad_settings_exit_2_with_one_clear_line(tmp_path, args, message):
    out = train(*(args(tmp_path) if callable(args) else args))
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr


def test_table_dims_give_dcn_tables_of_their_own_dims(tmp_path):
    (tmp_path / "dims.toml").write_text("tables = 'per-feature'\ntable_dims = {C1 = 4}\n")
    out = train("--model", "dcn", "--config", tmp_path / "dims.toml", "--table-dim", "C3=32", *SHORT)
    summary(out)
    # the file's and the flags' entries add up; the rest keep --embedding-dim
    assert "26 tables (--store device): C1 (dim 4); C3 (dim 32); 24 of dim 16" in out.stdout


def test_the_mlperf_dcnv2_preset_trains_and_learns(tmp_path):
    path = tmp_path / "metrics.jsonl"
    # the preset's model and data at a batch and eval set small enough for 2 cores; its own: 400 steps of 1024
    out = train("--preset", "mlperf-dcnv2", "--steps", "16", "--batch-size", "128", "--eval-rows", "1000",
                "--eval-every", "4", "--log-every", "4", "--no-progress", "--metrics-out", path)
    summary(out)
    assert "preset: mlperf-dcnv2, MLPerf DLRM-DCNv2" in out.stdout and "capped at 1,000,000 rows each" in out.stdout
    assert re.search(r"model: dcn \(.*rank 512.*bottom 512-256-128.*; 26 tables of dim 128 \(", out.stdout)
    assert "rows adagrad lr 0.005" in out.stdout
    records = [json.loads(line) for line in path.read_text().splitlines()]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    aucs = [r["auc"] for r in records if r["kind"] == "eval"]
    assert len(losses) == 4 and all(0 < x < 2 for x in losses), losses
    assert len(aucs) == 4 and aucs[-1] > max(0.6, aucs[0] + 0.04), aucs  # 0.574 at step 4, 0.637 at 16 when written


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed here")
def test_plot_draws_the_curves_to_a_png(tmp_path):
    summary(train(*SHORT, "--eval-every", "1", "--plot", tmp_path / "curves.png"))
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_fails_at_startup(tmp_path):
    # The test extra installs matplotlib, so a stand-in that fails to import hides it from the run.
    (tmp_path / "hide" / "matplotlib").mkdir(parents=True)
    (tmp_path / "hide" / "matplotlib" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    out = train("--plot", tmp_path / "curves.png", PYTHONPATH=str(tmp_path / "hide"))
    assert out.returncode == 2 and "--plot: needs matplotlib" in out.stderr
    assert "device:" not in out.stdout  # refused before any data was made or step taken
