"""tools/train.py on the settings an adversarial user found to end in a traceback: each is one line and exit 2,
before any training step."""
import os
import pathlib
import subprocess
import sys

import pytest

TRAIN = pathlib.Path(__file__).resolve().parents[3] / "tools" / "train.py"
TINY = ["--steps", "2", "--batch-size", "64", "--train-rows", "512", "--eval-rows", "256", "--no-progress"]


def one_line(*args):
    """The one stderr line of a train.py run that must stop with exit code 2."""
    out = subprocess.run([sys.executable, str(TRAIN), *TINY, *map(str, args)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "GPUEMB_DEVICE": "cpu"})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr
    return out.stderr


@pytest.mark.parametrize("where, why", [("folder", "Is a directory"),
                                        ("under_a_file", "a file stands where its folder would be")])
def test_a_metrics_out_that_cannot_be_written(where, why, tmp_path):
    (tmp_path / "file").touch()
    path = {"folder": tmp_path, "under_a_file": tmp_path / "file" / "m.jsonl"}[where]
    assert f"--metrics-out {path}: cannot be written ({why})" in one_line("--metrics-out", path)


def test_a_seed_past_64_bits():
    assert "--seed: 1180591620717411303424 is above 18446744073709551615" in one_line("--seed", 2 ** 70)


def test_a_model_that_does_not_fit_in_memory_says_what_to_lower():
    line = one_line("--embedding-dim", 10 ** 10)
    assert "the model does not fit in memory" in line and "Unable to allocate" in line, line
    assert "lower --embedding-dim 10000000000" in line, line
