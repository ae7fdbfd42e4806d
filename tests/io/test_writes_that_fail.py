"""A disk that fills up while shards or metrics are written, or two writers of one shard folder: one line, never a
traceback, and nothing lost.

The full disk is the ``disk_full_run`` fixture's file size limit (tests/conftest.py).
"""
import os
from pathlib import Path

import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.errors import DataError
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions, list_shards

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_a_full_disk_while_converting_is_one_line_and_leaves_no_partial_shard(tmp_path, disk_full_run):
    out = disk_full_run(200_000, TOOLS / "convert.py", "synthetic", "--preset", "small", "--rows", "50000",
                        "--test-rows", "0", "--out", tmp_path / "shards")
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"convert.py: {tmp_path / 'shards' / 'train' / 'part-00000.h5'}: File too large after ")
    assert "free space on that disk" in line
    # the shard being written is gone, temp file and all; the manifest marks the folder as never finished
    assert os.listdir(tmp_path / "shards" / "train") == ["manifest.json"]
    with pytest.raises(DataError, match="manifest.json: the conversion writing this folder has not finished"):
        list_shards(tmp_path / "shards", "train")


def test_a_full_disk_under_the_metrics_file_is_one_line(tmp_path, disk_full_run):
    metrics = tmp_path / "m.jsonl"
    out = disk_full_run(300, TOOLS / "train.py", "--steps", "3", "--batch-size", "256", "--train-rows", "2048",
                        "--eval-rows", "256", "--no-progress", "--log-every", "1", "--metrics-out", metrics)
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"train.py: error: --metrics-out {metrics}: writing the train record of step ")
    assert "free space on that disk" in line
    assert metrics.stat().st_size <= 300  # what fitted stays


def test_a_second_writer_of_one_shard_folder_is_refused_and_the_first_finishes(tmp_path, rng):
    layout = ShardLayout(("y",), ("d0",), ("s0", "s1"))
    rows = Batch(rng.random(64).astype(np.float32), rng.random((64, 1)).astype(np.float32),
                 rng.integers(0, 1 << 40, (64, 2)))
    first = ShardWriter(tmp_path, layout, WriteOptions(chunk_rows=16, rows_per_shard=32))
    first.append(rows.slice(0, 40))
    with pytest.raises(DataError, match="another conversion is writing shards there"):
        ShardWriter(tmp_path, layout)  # it would have written part-00000.h5.tmp over the first's
    first.append(rows.slice(40, 64))
    assert len(first.close()) == 2
    source = ShardSource(list_shards(str(tmp_path)))
    back = Batch.concat([source.read_block(i) for i in range(len(source.blocks))])
    np.testing.assert_array_equal(back.sparse, rows.sparse)  # the first writer's rows, whole
    assert ShardWriter(tmp_path, layout).close() == []  # close() let go of the lock
