"""A disk that fills up while shards or metrics are written: one line and exit code 1, never a traceback.

The full disk is the ``disk_full_run`` fixture's file size limit (tests/conftest.py).
"""
import os
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_a_full_disk_while_converting_is_one_line_and_leaves_no_partial_shard(tmp_path, disk_full_run):
    out = disk_full_run(200_000, TOOLS / "convert.py", "synthetic", "--preset", "small", "--rows", "50000", "--test-rows", "0",
                  "--out", tmp_path / "shards")
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"convert.py: {tmp_path / 'shards' / 'train' / 'part-00000.h5'}: File too large after ")
    assert "free space on that disk" in line
    assert os.listdir(tmp_path / "shards" / "train") == []  # the shard being written is gone, temp file and all


def test_a_full_disk_under_the_metrics_file_is_one_line(tmp_path, disk_full_run):
    metrics = tmp_path / "m.jsonl"
    out = disk_full_run(300, TOOLS / "train.py", "--steps", "3", "--batch-size", "256", "--train-rows", "2048", "--eval-rows",
                  "256", "--no-progress", "--log-every", "1", "--metrics-out", metrics)
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"train.py: error: --metrics-out {metrics}: writing the train record of step ")
    assert "free space on that disk" in line
    assert metrics.stat().st_size <= 300  # what fitted stays
