"""Multi-hot and jagged models through the command line: tools/train.py trains a few steps and checkpoints,
tools/export.py writes the bundle, and a Predictor of it answers fresh rows (a quarter of the keys never seen) as
the checkpoint's model does in eval mode, to 1e-5: the multihot preset's fixed-hotness features, and a Parquet
file's list column converted by tools/convert.py into a jagged feature."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.serve import Predictor
from gpuemb.serve.checkpoint import load_model

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "3", "--batch-size", "64", "--no-progress", "--embedding-dim", "4", "--model-arg", "bottom=[8]",
        "--model-arg", "top=[16]"]


def _tool(name, *args):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / name), *map(str, args)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env={**os.environ, "GPUEMB_DEVICE": "cpu"})
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _trained_and_exported(folder, *train_args):
    """``(checkpoint folder, bundle folder)`` of a tiny run of tools/train.py exported by tools/export.py."""
    _tool("train.py", *train_args, *TINY, "--checkpoint-dir", folder / "ckpt")
    _tool("export.py", folder / "ckpt", "--out", folder / "bundle")
    return folder / "ckpt" / "step-000000003", folder / "bundle"


def _fresh(rng, shape):
    keys = rng.integers(0, 50, shape)
    unseen = rng.random(shape) < 0.25
    keys[unseen] = rng.integers(2 ** 40, 2 ** 62, int(unseen.sum()))
    return keys


def _same_as_the_model(checkpoint, bundle, dense, sparse):
    model = load_model(checkpoint)
    with no_grad():
        want = to_host(model(dense, sparse).data)
    with Predictor(bundle, runtime="numpy") as p:
        got = p.predict(dense, sparse)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.std(want) > 0  # rows that differ, so the comparison means something


def test_a_multihot_run_exported_predicts_as_its_checkpoint(tmp_path):
    checkpoint, bundle = _trained_and_exported(tmp_path, "--preset", "multihot", "--train-rows", 2000,
                                               "--eval-rows", 200)
    with Predictor(bundle, runtime="numpy") as p:
        features, n_dense = p.manifest["features"], p.manifest["n_dense"]
    hotness = [f["hotness"] for f in features]
    assert max(hotness) > 1 and all(type(h) is int for h in hotness)
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(64, n_dense)).astype(np.float32)
    _same_as_the_model(checkpoint, bundle, dense, _fresh(rng, (64, sum(hotness))))


def test_a_parquet_list_column_converted_trained_and_exported_predicts_as_its_checkpoint(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="the Parquet reader needs pyarrow (pip install -e '.[parquet]')")
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    n = 800
    tags = [rng.integers(0, 80, rng.integers(0, 5)).tolist() for _ in range(n)]  # empty bags too
    pq.write_table(pa.table({"y": rng.integers(0, 2, n).astype(float), "d": rng.normal(size=n),
                             "c": rng.integers(0, 50, n), "tags": pa.array(tags, pa.list_(pa.int64()))}),
                   tmp_path / "x.parquet", row_group_size=200)
    _tool("convert.py", "parquet", tmp_path / "x.parquet", "--label", "y", "--dense", "d", "--categorical", "c",
          "tags", "--split", "0.8", "0", "0.2", "--out", tmp_path / "shards")
    checkpoint, bundle = _trained_and_exported(tmp_path, "--data", tmp_path / "shards")
    with Predictor(bundle, runtime="numpy") as p:
        assert p.manifest["features"] == [{"name": "c", "hotness": 1}, {"name": "tags", "hotness": "jagged"}]
    B = 64
    lengths = np.stack([np.ones(B, np.int64), rng.integers(0, 5, B)])  # [F, B]: c one key a row, tags 0 to 4
    sparse = JaggedFeatures.from_lengths(("c", "tags"), _fresh(rng, int(lengths.sum())), lengths)
    _same_as_the_model(checkpoint, bundle, rng.normal(size=(B, 1)).astype(np.float32), sparse)
