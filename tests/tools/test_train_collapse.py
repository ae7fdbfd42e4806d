"""A learning rate far too high saturates the model without a non-finite loss: the run says so (issue 15)."""
import json
import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "tools" / "train.py"
TINY = ["--steps", "20", "--train-rows", "4096", "--batch-size", "256", "--eval-rows", "1000", "--eval-every", "10",
        "--no-progress"]


def run(tmp_path, *args):
    metrics = tmp_path / "m.jsonl"
    out = subprocess.run([sys.executable, TRAIN, *TINY, *args, "--metrics-out", metrics], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out, [json.loads(line) for line in metrics.read_text().splitlines()]


def test_a_collapsed_model_is_reported_once_with_what_to_try(tmp_path):
    out, records = run(tmp_path, "--lr", "30")
    warnings = [r for r in records if r["kind"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["step"] == 10, records
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: warning: the model collapsed by step 10: eval AUC 0.5")
    assert "try a lower --lr (now 30)" in lines[0]
    evals = [r for r in records if r["kind"] == "eval"]
    assert all(r["auc"] < 0.55 and r["log_loss"] > 1.386 for r in evals)  # what the warning said was so


def test_a_run_that_learns_says_nothing(tmp_path):
    out, records = run(tmp_path)  # the default learning rate
    assert out.stderr == "" and not [r for r in records if r["kind"] == "warning"]
    assert [r for r in records if r["kind"] == "eval"][-1]["auc"] > 0.55  # it learned: the check had a chance
