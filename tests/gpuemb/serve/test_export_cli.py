"""End to end through the command lines: ``tools/train.py`` writes a checkpoint, ``tools/export.py`` makes it a
bundle, and the bundle predicts what the checkpoint's model evaluates to; bad arguments are one line and a
non-zero exit."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from gpuemb.autograd import no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.serve import Predictor
from gpuemb.serve.checkpoint import load_model

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def _cli(tool, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "GPUEMB_DEVICE": "cpu"})


def _rows(model, n=300, seed=5):
    """Held-out requests: keys in the synthetic range, a fifth of them never seen."""
    rng = np.random.default_rng(seed)
    sparse = rng.integers(0, 1000, (n, model.embeddings.n_features))
    fresh = rng.random(sparse.shape) < 0.2
    sparse[fresh] = rng.integers(2 ** 40, 2 ** 62, int(fresh.sum()))
    return rng.normal(size=(n, model.n_dense)).astype(np.float32), sparse


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``{model: step folder}``: DLRM over one shared table, DeepFM over per-feature tables (first order); fp16
    tables go through the command lines in test_a_checkpoint_exports_after_its_data_is_gone."""
    out = {}
    for name, flags in (("dlrm", ()), ("deepfm", ("--tables", "per-feature"))):
        folder = tmp_path_factory.mktemp(name)
        run = _cli("train.py", "--model", name, "--steps", 12, "--batch-size", 256, "--train-rows", 4096,
                   "--eval-rows", 1000, "--checkpoint-dir", folder, "--checkpoint-every", 12, *flags)
        assert run.returncode == 0, run.stderr[-2000:]
        out[name] = folder / "step-000000012"
    return out


@pytest.mark.parametrize("name", ["dlrm", "deepfm"])
def test_exported_checkpoint_predicts_its_model(name, checkpoints, tmp_path):
    run = _cli("export.py", checkpoints[name].parent, "--out", tmp_path / "b")  # the dir: its latest checkpoint
    assert run.returncode == 0 and run.stdout.startswith("export.py: "), run.stderr
    assert onnx.load(tmp_path / "b" / "model.onnx").opset_import[0].version >= 17
    model = load_model(checkpoints[name])
    dense, sparse = _rows(model)
    with no_grad():
        want = to_host(model(dense, sparse).data)
    for runtime in ("numpy", "auto"):
        with Predictor(tmp_path / "b", runtime=runtime) as p:
            np.testing.assert_allclose(p.predict(dense, sparse), want, rtol=0, atol=1e-5, err_msg=runtime)
    assert np.std(want) > 1e-3


@pytest.mark.parametrize("args, words, code", [
    (["--rows", "int4"], "invalid choice: 'int4'", 2),
    ([], "nothing: holds no checkpoint", 1),
])
def test_bad_arguments_are_one_line(args, words, code, tmp_path):
    run = _cli("export.py", tmp_path / "nothing", "--out", tmp_path / "b", *args)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == code and words in last and "Traceback" not in run.stderr, run.stderr
    assert "--resume" not in run.stderr, run.stderr  # a flag of train.py, not of export.py
    assert not (tmp_path / "b").exists()


def _one_line(run):
    assert run.returncode == 1 and "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    return run.stderr


def test_a_bundle_given_for_a_checkpoint_is_one_line(checkpoints, tmp_path):
    assert _cli("export.py", checkpoints["dlrm"], "--out", tmp_path / "b").returncode == 0
    line = _one_line(_cli("export.py", tmp_path / "b", "--out", tmp_path / "again"))
    assert f"{tmp_path / 'b'} is an inference bundle, not a checkpoint" in line, line


def test_a_full_disk_names_the_file_and_leaves_the_bundle_there(checkpoints, tmp_path):
    import resource
    import signal

    def full_disk():  # writes past 100 kB fail with EFBIG, as on a full disk with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
    out = tmp_path / "b"
    assert _cli("export.py", checkpoints["dlrm"], "--out", out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "export.py"), str(checkpoints["dlrm"]), "--out",
                          str(out)], capture_output=True, text=True, cwd=ROOT, preexec_fn=full_disk,
                         env={**os.environ, "GPUEMB_DEVICE": "cpu"})
    assert f"export.py: error: {out / 'model.onnx'}: cannot be written (File too large); free space" in \
        _one_line(run), run.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and os.listdir(tmp_path) == ["b"]


def test_corrupt_checkpoint_is_one_line(checkpoints, tmp_path):
    folder = tmp_path / "ck"
    subprocess.run(["cp", "-r", str(checkpoints["dlrm"]), str(folder)], check=True)
    with open(folder / "state.h5", "r+b") as f:
        f.seek(os.path.getsize(folder / "state.h5") // 2)
        f.write(b"\x00garbage\x00")
    run = _cli("export.py", folder, "--out", tmp_path / "b")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "CRC32" in run.stderr, run.stderr


def test_a_checkpoint_exports_after_its_data_is_gone(tmp_path):
    """The manifest records the data's shape, so a checkpoint of a run on a raw file exports once the file has
    been moved away; a checkpoint whose recorded shape was damaged is one CheckpointError line."""
    import json
    import shutil

    data = tmp_path / "criteo.tsv"
    shutil.copy(ROOT / "tests" / "io" / "data" / "criteo_sample.tsv", data)
    run = _cli("train.py", "--model", "dlrm", "--data", data, "--format", "criteo", "--steps", 4, "--batch-size",
               64, "--checkpoint-dir", tmp_path / "ck", "--checkpoint-every", 4, "--embedding-dtype", "fp16")
    assert run.returncode == 0, run.stderr[-2000:]
    data.unlink()
    export = _cli("export.py", tmp_path / "ck", "--out", tmp_path / "b", "--rows", "fp16")
    assert export.returncode == 0, export.stderr
    manifest = json.loads((tmp_path / "ck" / "step-000000004" / "manifest.json").read_text())
    shape = manifest["body"]["data_shape"]
    assert shape["n_dense"] == 13 and len(shape["sparse_names"]) == 26 and shape["label_names"] == ["label"]
    with Predictor(tmp_path / "b") as p:
        out = p.predict(np.random.default_rng(0).normal(size=(8, 13)).astype(np.float32),
                        np.random.default_rng(1).integers(0, 1 << 30, (8, 26)))
    assert out.shape == (8,) and np.isfinite(out).all()


def test_a_damaged_data_shape_is_one_line():
    from gpuemb.serve.checkpoint import data_shape
    from gpuemb.train.checkpoint import CheckpointError

    good = {"data_shape": {"n_dense": 3, "sparse_names": ["a", "b"], "label_names": ["y"], "sparse_hotness": [3, 0]}}
    shape = data_shape(None, good)
    assert (shape.n_dense, shape.n_features, shape.n_tasks, shape.sparse_names) == (3, 2, 1, ("a", "b"))
    assert shape.sparse_hotness == (3, "jagged") and shape.hotness is None  # jagged bags come as JaggedFeatures
    for bad in ({"n_dense": "3", "sparse_names": ["a"], "label_names": ["y"]}, {"n_dense": 3, "label_names": ["y"]},
                {"n_dense": 3, "sparse_names": ["a"], "label_names": ["y"], "sparse_hotness": [1, 2]},
                {"n_dense": 3, "sparse_names": [], "label_names": ["y"]}, ["not", "a", "dict"]):
        with pytest.raises(CheckpointError, match="data_shape"):
            data_shape(None, {"data_shape": bad})
