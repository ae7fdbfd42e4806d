"""What tools/train.py and tools/convert.py print for a new user (issue 31, item 6): a log without progress bars,
one announcement of numba's first compile, and a conversion that train.py takes as it is."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRITEO = ROOT / "tests" / "io" / "data" / "criteo_sample.tsv"
ANNOUNCEMENT = "compiling kernels on first use"


def tool(name, *args, **env_vars):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", **env_vars}
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), *map(str, args)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_a_log_gets_a_plain_line_every_log_every_steps_and_no_bar():
    out = tool("train.py", "--steps", "6", "--log-every", "2", "--batch-size", "256", "--eval-rows", "1000")
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stdout and "\r" not in out.stderr  # stdout and stderr are pipes, not terminals
    steps = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("step") and " loss " in line]
    assert steps == ["2", "4", "6"], out.stdout


def test_the_first_compile_is_announced_once_and_a_converted_folder_trains_as_it_is(tmp_path):
    cold = tool("convert.py", "criteo", CRITEO, "--out", tmp_path / "shards", NUMBA_CACHE_DIR=tmp_path / "numba")
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.count(ANNOUNCEMENT) == 1, cold.stdout
    assert "leaving out" in cold.stdout  # its rows/s leaves the compiling out
    rows = cold.stdout.splitlines()[1]
    assert rows.startswith("train: ") and ", test: " in rows and "held out by --split" in rows, cold.stdout
    warm = tool("convert.py", "criteo", CRITEO, "--out", tmp_path / "again", NUMBA_CACHE_DIR=tmp_path / "numba")
    assert warm.returncode == 0 and ANNOUNCEMENT not in warm.stdout, warm.stdout
    # the default split held rows out, so train.py evaluates on them with no flag for it
    trained = tool("train.py", "--data", tmp_path / "shards", "--steps", "2", "--no-progress")
    assert trained.returncode == 0, trained.stderr
    assert trained.stdout.splitlines()[-1].startswith("done: step 2"), trained.stdout


def test_split_1_0_0_holds_nothing_out_and_says_what_train_py_needs(tmp_path):
    out = tool("convert.py", "criteo", CRITEO, "--out", tmp_path / "shards", "--split", "1", "0", "0")
    assert out.returncode == 0, out.stderr
    assert "train: 200 rows (none held out: train.py --data needs --eval-data" in out.stdout, out.stdout
    assert not (tmp_path / "shards" / "test").exists()
