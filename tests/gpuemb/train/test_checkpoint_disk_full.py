"""A disk that fills up while a checkpoint is written: one line and exit code 1, the last checkpoint intact.

The full disk is the ``disk_full_run`` fixture's file size limit (tests/conftest.py).
"""
import os
from pathlib import Path

import pytest

from gpuemb.train import TrainConfig, train
from gpuemb.train import checkpoint as ckpt

TRAIN = Path(__file__).resolve().parents[3] / "tools" / "train.py"
TINY = ["--embedding-dim", "8", "--batch-size", "32", "--train-rows", "512", "--eval-rows", "64", "--no-progress",
        "--seed", "3"]


@pytest.fixture(scope="module")
def sizes(tmp_path_factory):
    """The sizes of the files of a checkpoint of the tiny run."""
    where = tmp_path_factory.mktemp("sizes") / "ckpt"
    train(TrainConfig.from_dict({"embedding_dim": 8, "batch_size": 32, "train_rows": 512, "eval_rows": 64,
                                 "steps": 1, "progress": False, "seed": 3, "checkpoint_dir": str(where)}))
    folder = where / "step-000000001"
    return {name: os.path.getsize(folder / name) for name in (ckpt.EMBEDDINGS, ckpt.STATE)}


@pytest.mark.parametrize("full_in", [ckpt.EMBEDDINGS, ckpt.STATE])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_one(tmp_path, sizes, full_in,
                                                                            disk_full_run):
    where = tmp_path / "ckpt"
    before = disk_full_run(1 << 40, TRAIN, *TINY, "--steps", "2", "--checkpoint-dir", where)
    assert before.returncode == 0, before.stderr
    # a limit that the other file of a checkpoint stays under
    limit = sizes[full_in] // 2 if full_in == ckpt.EMBEDDINGS or sizes[ckpt.EMBEDDINGS] < sizes[ckpt.STATE] // 2 \
        else sizes[ckpt.EMBEDDINGS] + (sizes[ckpt.STATE] - sizes[ckpt.EMBEDDINGS]) // 2
    assert limit < sizes[full_in] and (full_in == ckpt.EMBEDDINGS or limit > sizes[ckpt.EMBEDDINGS])
    out = disk_full_run(limit, TRAIN, *TINY, "--steps", "4", "--checkpoint-every", "3", "--checkpoint-dir", where,
                        "--resume", "latest")
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert str(where) in lines[0] and full_in in lines[0] and "step 3" in lines[0]
    assert "free space" in lines[0] and "--checkpoint-dir" in lines[0]
    assert sorted(os.listdir(where)) == ["latest", "step-000000002"]  # no temp folder left
    assert (where / "latest").read_text().strip() == "step-000000002"
    assert ckpt.read_manifest(where / "step-000000002")["step"] == 2
