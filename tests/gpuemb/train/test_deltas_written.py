"""A run with --delta-every N --delta-dir D writes a chain of deltas: one every N steps, at each checkpoint and at
the last step, each starting where the one before ends, in an index; a run interrupted and resumed continues the
chain with the deltas the uninterrupted run writes; the flags train and resume through tools/train.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuemb.serve.delta_chain import delta_file, read_index
from gpuemb.store.snapshot import read_snapshot
from gpuemb.train import Reporter, TrainConfig, train

ROOT = Path(__file__).resolve().parents[3]
STEPS = 10


def config(folder, **changes):
    """Checkpoints at 6 and 10, deltas at 4, 6, 8 and 10, with keys evicted on the way (so deltas drop keys)."""
    return TrainConfig.from_dict({**dict(
        model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, train_rows=3000, eval_rows=300,
        progress=False, seed=3, steps=STEPS, checkpoint_dir=str(folder / "ckpt"), checkpoint_every=6,
        delta_every=4, delta_dir=str(folder / "deltas"), evict_every=2, evict_ttl=3), **changes})


class Interrupt(Reporter):
    """Stops the run as a Ctrl-C would, after step ``at``."""

    def __init__(self, at):
        self.at = at

    def step(self, run, loss):
        if run.step == self.at:
            raise KeyboardInterrupt


def _deleted(folder, step):
    return {n: t.extra("deleted") for n, t in read_snapshot(folder / "deltas" / delta_file(step)).tables.items()} \
        if step else {}


def contents(folder, step, before=0):
    """What the delta of ``step`` holds: its markers, and per table its keys, rows, steps and the keys it drops that
    the delta of ``before`` did not; and its graph. A key evicted after a step's update is logged at the next tick,
    so the delta up to that step and the next both drop it, where a table restored at the step (its drop log
    empty) has only the first: the same state once applied, and the new drops the same."""
    snap, earlier = read_snapshot(folder / "deltas" / delta_file(step)), _deleted(folder, before)
    tables = {n: (*(np.concatenate(p) for p in zip(*t.chunks())),
                  np.setdiff1d(t.extra("deleted"), earlier.get(n, []))) for n, t in snap.tables.items()}
    return snap.meta, tables, (folder / "deltas" / delta_file(step, "onnx")).read_bytes()


def same(a, b):
    (meta_a, tables_a, graph_a), (meta_b, tables_b, graph_b) = a, b
    return meta_a == meta_b and graph_a == graph_b and tables_a.keys() == tables_b.keys() and all(
        np.array_equal(x, y) for n in tables_a for x, y in zip(tables_a[n], tables_b[n]))


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    train(config(folder))
    return folder


def test_the_chain_has_a_delta_every_n_steps_at_each_checkpoint_and_at_the_end(whole):
    chain, entries = read_index(whole / "deltas")
    assert [(e["step"], e["since"], e["checkpoint"]) for e in entries] == [
        (4, 0, False), (6, 4, True), (8, 6, False), (10, 8, True)]
    metas = [read_snapshot(whole / "deltas" / e["tables"]["file"]).meta for e in entries]
    assert all(a["until"] == b["since"] for a, b in zip(metas, metas[1:]))  # the tables' markers, in a chain
    deleted = [_deleted(whole, e["step"])["embeddings"].size for e in entries]
    rows = [contents(whole, e["step"])[1]["embeddings"][0].size for e in entries]
    assert sum(deleted) > 0 and min(rows) > 0, (deleted, rows)


def test_a_resumed_run_continues_the_chain_with_the_same_deltas(whole, tmp_path):
    with pytest.raises(KeyboardInterrupt):  # after the delta of step 8: the resume writes it again
        train(config(tmp_path), Interrupt(9))
    chain, entries = read_index(tmp_path / "deltas")
    assert [e["step"] for e in entries] == [4, 6, 8]
    train(config(tmp_path, resume="latest"))
    again, resumed = read_index(tmp_path / "deltas")
    assert again == chain and [(e["step"], e["since"]) for e in resumed] == [(4, 0), (6, 4), (8, 6), (10, 8)]
    assert resumed[:2] == entries[:2]  # the deltas up to the checkpoint are kept as they were
    for before, step in ((0, 4), (4, 6), (6, 8), (8, 10)):
        assert same(contents(whole, step, before), contents(tmp_path, step, before)), f"the delta of {step} differs"


def _train_py(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "train.py"), *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "GPUEMB_DEVICE": "cpu"})


def test_the_flags_train_and_resume(tmp_path):
    short = ["--batch-size", 128, "--train-rows", 2000, "--eval-rows", 500, "--no-progress",
             "--checkpoint-dir", tmp_path / "ckpt", "--delta-every", 2, "--delta-dir", tmp_path / "deltas"]
    first = _train_py("--steps", 3, *short)
    assert first.returncode == 0, first.stderr
    chain, entries = read_index(tmp_path / "deltas")
    assert [e["step"] for e in entries] == [2, 3]
    resumed = _train_py("--steps", 5, "--resume", *short)
    assert resumed.returncode == 0, resumed.stderr
    assert read_index(tmp_path / "deltas") == (chain, entries + read_index(tmp_path / "deltas")[1][2:])
    assert [e["step"] for e in read_index(tmp_path / "deltas")[1]] == [2, 3, 4, 5]
    body = json.loads((tmp_path / "deltas" / "deltas.json").read_text())["body"]
    assert body["first"] == 0 and body["chain"] == chain
    again = _train_py("--steps", 3, *short[:-6], "--checkpoint-dir", tmp_path / "other", *short[-4:])
    assert again.returncode != 0 and "holds the deltas of another run" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and "Traceback" not in again.stderr
