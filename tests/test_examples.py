"""Every example in examples/ runs to its end and passes its own checks (each exits non-zero when they fail)."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_JAX = importlib.util.find_spec("jax") is not None


def _run(*args):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_every_example_is_run_here():
    examples = sorted(n for n in os.listdir(os.path.join(ROOT, "examples")) if n != "__pycache__")  # Python's own
    assert examples == ["jax_client.py", "store_standalone.py"]


def test_store_standalone_matches_numpy_rowwise_adagrad():
    out = _run("examples/store_standalone.py")
    # its three tables are one store, so the probe was one lookup
    assert "released 1 lookups" in out and "eval output recorded: False" in out


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed (pip install jax): the JAX client example needs it")
@pytest.mark.parametrize("tables", ["per-feature", "shared"])
def test_jax_client_trains_without_copying_rows(tables):
    out = _run("examples/jax_client.py", "--tables", tables, "--steps", "300")
    assert "copied on the way to JAX in 0 of 300 steps" in out
