"""A bundle follows a training run: the bundle of an early checkpoint plus the run's deltas after it equals the
export of the final checkpoint, row for row and prediction for prediction, in every row format, in memory and
from disk; a delta out of order, after a gap, of another run or damaged is one BundleError line and leaves the
predictions as they were; ``tools/serve_follow.py`` applies a folder's deltas in order, a line each."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuemb.serve import BundleError, Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.checkpoint import load_export
from gpuemb.serve.delta_chain import delta_file
from gpuemb.store.snapshot import read_snapshot
from gpuemb.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[3]
FIRST, LAST = 6, 10  # checkpoints at 6 and 10; deltas at 4, 6, 8 and 10
AFTER = [8, 10]  # the deltas after the early checkpoint


def _run(folder, seed=3):
    """A small DLRM run whose keys are evicted as it goes, so deltas drop keys as well as set rows."""
    train(TrainConfig.from_dict(dict(
        model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, train_rows=3000, eval_rows=300,
        progress=False, seed=seed, steps=LAST, checkpoint_dir=str(folder / "ckpt"), checkpoint_every=FIRST,
        keep_checkpoints=3, delta_every=4, delta_dir=str(folder / "deltas"), evict_every=2, evict_ttl=3)))
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(run folder, {(step, rows): bundle})``: the run, and its checkpoints of steps 6 and 10 exported."""
    folder = _run(tmp_path_factory.mktemp("run"))
    bundles = {}
    for step in (FIRST, LAST):
        got = load_export(folder / "ckpt" / f"step-{step:09d}")
        for rows in ("fp32", "fp16", "int8"):
            out = bundles[step, rows] = folder / f"bundle-{step}-{rows}"
            write_bundle(got["model"], out, rows, got["names"], got["hotness"], got["sources"], got["origin"])
    # a bundle that records no checkpoint (one written before bundles did, or of a bare model)
    write_bundle(got["model"], folder / "bundle-bare", "fp32", got["names"], got["hotness"], got["sources"])
    return folder, bundles


def _requests(p, n=400, seed=5):
    """Requests to Predictor ``p`` over the run's keys and keys it never saw."""
    rng = np.random.default_rng(seed)
    sparse = rng.integers(0, 1000, (n, p.manifest["n_features"]))
    sparse[rng.random(sparse.shape) < 0.2] = rng.integers(2 ** 40, 2 ** 62)
    return rng.normal(size=(n, p.manifest["n_dense"])).astype(np.float32), sparse


def _delta(folder, step):
    return folder / "deltas" / delta_file(step)


def _rows(p):
    """``{table: (keys, weights)}`` of every key a Predictor serves."""
    return {name: (t.keys.copy(), t.lookup(t.keys)) for name, t in p.tables.items()}


@pytest.mark.parametrize("cache", [None, 64], ids=["in-memory", "from-disk"])
@pytest.mark.parametrize("rows", ["fp32", "fp16", "int8"])
def test_an_early_bundle_plus_the_deltas_after_it_is_the_final_export(run, rows, cache):
    folder, bundles = run
    with Predictor(bundles[FIRST, rows], cache, "numpy", from_step=FIRST) as p, \
            Predictor(bundles[LAST, rows], cache, "numpy") as final:
        dense, sparse = _requests(p)
        before = p.predict(dense, sparse)
        assert [p.apply_delta(_delta(folder, s)) for s in AFTER] == AFTER and p.step == LAST
        got, want = _rows(p), _rows(final)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name][0], want[name][0])
            np.testing.assert_array_equal(got[name][1], want[name][1])  # bit for bit: each row encoded alike
        np.testing.assert_array_equal(p.predict(dense, sparse), final.predict(dense, sparse))
        assert not np.array_equal(before, p.predict(dense, sparse))


def test_the_deltas_drop_keys_and_the_bundle_forgets_them(run):
    folder, bundles = run
    deleted = np.concatenate([read_snapshot(_delta(folder, s)).tables["embeddings"].extra("deleted") for s in AFTER])
    with Predictor(bundles[FIRST, "fp32"], runtime="numpy", from_step=FIRST) as p:
        held = p.tables["embeddings"].keys
        gone = deleted[np.isin(deleted, held)]
        assert gone.size, "the run's eviction dropped no key the early bundle holds"
        for s in AFTER:
            p.apply_delta(_delta(folder, s))
        final = np.isin(gone, p.tables["embeddings"].keys)
    with Predictor(bundles[LAST, "fp32"], runtime="numpy") as last:
        np.testing.assert_array_equal(final, np.isin(gone, last.tables["embeddings"].keys))
    assert not final.all()


def _refused(p, path, words):
    dense, sparse = _requests(p, 50)
    before, step = p.predict(dense, sparse), p.step
    with pytest.raises(BundleError) as e:
        p.apply_delta(path)
    line = str(e.value)
    assert words in line and "\n" not in line, line
    np.testing.assert_array_equal(p.predict(dense, sparse), before)  # the last good state, still served
    assert p.step == step


def test_a_delta_out_of_order_or_after_a_gap_is_refused(run):
    folder, bundles = run
    with Predictor(bundles[FIRST, "fp32"], runtime="numpy", from_step=FIRST) as p:
        _refused(p, _delta(folder, 10), "the steps 6 to 8 are missing (a gap in the chain)")
        _refused(p, _delta(folder, 6), "it is out of order")
        p.apply_delta(_delta(folder, 8))
        _refused(p, _delta(folder, 8), "holds the changes of steps 6 to 8, but the Predictor serves step 8")
    with Predictor(folder / "bundle-bare", runtime="numpy") as p:
        _refused(p, _delta(folder, 8), "pass from_step")


def test_a_bundle_follows_on_from_the_step_and_run_it_was_exported_from(run, tmp_path):
    folder, bundles = run
    with Predictor(bundles[FIRST, "fp32"], runtime="numpy") as p:  # no from_step: the manifest's
        assert p.step == FIRST and p.manifest["origin"]["chain"] == p.chain is not None
        other = _run(tmp_path, seed=4)
        _refused(p, _delta(other, 8), "follow one run's --delta-dir")  # the first delta is checked too
        assert p.apply_delta(_delta(folder, 8)) == 8


def test_a_delta_of_another_run_is_refused(run, tmp_path):
    folder, bundles = run
    other = _run(tmp_path, seed=4)
    copied = tmp_path / "copied"  # a file of the other run in this run's folder
    shutil.copytree(folder / "deltas", copied)
    shutil.copy(_delta(other, 8), copied / delta_file(8))
    with Predictor(bundles[FIRST, "fp32"], runtime="numpy", from_step=FIRST) as p:
        _refused(p, copied / delta_file(8), "the file is of another run")
        p.apply_delta(_delta(folder, 8))
        _refused(p, _delta(other, 10), "follow one run's --delta-dir")


@pytest.mark.parametrize("part", ["h5", "onnx", "deltas.json"])
def test_a_damaged_delta_is_refused(run, tmp_path, part):
    folder, bundles = run
    copied = tmp_path / "deltas"
    shutil.copytree(folder / "deltas", copied)
    target = copied / (part if part == "deltas.json" else delta_file(8, part))
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x5A
    target.write_bytes(bytes(data))
    words = {"h5": "corrupt", "onnx": "the delta is damaged", "deltas.json": "damaged"}[part]
    with Predictor(bundles[FIRST, "fp32"], runtime="numpy", from_step=FIRST) as p:
        _refused(p, copied / delta_file(8), words)


def test_serve_follow_applies_the_deltas_in_order(run, tmp_path):
    folder, bundles = run
    tool = [sys.executable, str(ROOT / "tools" / "serve_follow.py"), str(bundles[FIRST, "int8"])]
    done = subprocess.run([*tool, str(folder / "deltas"), "--once"], capture_output=True,  # the bundle's step
                          text=True, env={**os.environ, "GPUEMB_DEVICE": "cpu"}, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"step {s}: applied {_delta(folder, s)}" for s in AFTER]
    bad = subprocess.run([*tool, str(tmp_path), "--from-step", str(FIRST), "--once"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "is missing" in bad.stderr, \
        bad.stderr
