"""tools/train.py as a user runs it: a subprocess, its exit code and what it prints."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from gpuemb.autograd import backend

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "tools" / "train.py"


def train(*args, device="cpu"):
    env = {**os.environ, "GPUEMB_DEVICE": device}
    return subprocess.run([sys.executable, str(TRAIN), *args], env=env, capture_output=True, text=True, timeout=300)


def test_demo_loss_falls_towards_the_teacher():
    out = train("--steps", "200", "--batch-size", "512", "--log-every", "40", "--lr", "0.01")
    assert out.returncode == 0, out.stderr
    losses = [float(v) for v in re.findall(r"step +\d+ +loss ([\d.]+)", out.stdout)]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.1, out.stdout
    final, best = map(float, re.search(r"log-loss ([\d.]+), teacher's ([\d.]+)", out.stdout).groups())
    assert best - 0.01 < final < best + 0.08, out.stdout


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU, so --device cuda works")
def test_cuda_without_gpu_is_a_short_message():
    out = train("--steps", "1", device="cuda")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "no GPU can be used" in out.stderr and len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--steps", "0"], "--steps must be positive"),
    (["--lr", "nan"], "--lr must be positive"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
])
def test_bad_flags_exit_2_with_one_clear_line(args, message):
    out = train(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
