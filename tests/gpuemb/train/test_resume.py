"""The issue's test: N+M steps in one run equal N steps, a checkpoint, fresh objects resuming it, then M steps."""
import numpy as np
import pytest

from gpuemb.train import Reporter, TrainConfig, train
from gpuemb.train.metrics_log import read_metrics, without_timing

N, M = 5, 4


def config(tmp_path, name, **changes):
    """A small run with dropout, a decaying schedule and a log window that a checkpoint splits."""
    base = dict(model_args={"dropout": 0.2, "top": [32, 16], "bottom": [16]}, embedding_dim=8, batch_size=128,
                eval_rows=3000, eval_every=3, log_every=2, schedule="warmup_poly", warmup_steps=2, decay_steps=8,
                progress=False, metrics_out=str(tmp_path / f"{name}.jsonl"), seed=3)
    return TrainConfig.from_dict({**base, **changes})


def rows(table):
    """Every (key, full row, step) of a table, sorted by key: export order depends on the table's history."""
    keys, values, steps = (np.concatenate(parts) for parts in zip(*table.export()))
    order = np.argsort(keys)
    return keys[order], values[order], steps[order]


def state(run):
    """Every array a resume must reproduce: dense parameters, optimizer state, embedding rows."""
    arrays = {f"param {k}": v for k, v in run.model.state_dict().items()}
    for name, saved in run.optimizer.state_dict()["params"].items():
        arrays.update({f"optimizer {name} {k}": np.asarray(v) for k, v in saved.items()})
    for name, table in run.tables.items():
        arrays.update(zip((f"{name} keys", f"{name} rows", f"{name} steps"), rows(table)))
    return arrays


class Capture(Reporter):
    """Keeps the arrays of the run it reports on, read as it ends (before its tables close)."""

    def start(self, run):
        self.run = run

    def close(self):
        if hasattr(self, "run"):  # not when the run failed before its start
            self.arrays = state(self.run)


LIFECYCLE = {"admit_after": 2, "evict_every": 2, "evict_ttl": 3}  # evictions on both sides of the checkpoint


@pytest.mark.parametrize("store", [{}, {"store": "host", "cache_rows": 3000}, {"train_rows": 3 * 128 + 50},
                                   LIFECYCLE], ids=["device", "host", "epochs", "lifecycle"])
def test_n_plus_m_steps_equal_n_steps_saved_resumed_then_m(tmp_path, store):
    whole, resumed = Capture(), Capture()
    train(config(tmp_path, "whole", steps=N + M, **store), whole)
    ckpt = str(tmp_path / "ckpt")
    first = train(config(tmp_path, "split", steps=N, checkpoint_dir=ckpt, **store))
    assert first["checkpoint"].endswith(f"step-{N:09d}")
    summary = train(config(tmp_path, "split", steps=N + M, checkpoint_dir=ckpt, resume="latest", **store), resumed)
    assert (summary["steps"], summary["steps_this_run"]) == (N + M, M)

    want, got = whole.arrays, resumed.arrays
    assert want.keys() == got.keys() and len(want) > 10
    assert not [k for k in want if not np.array_equal(want[k], got[k])], "arrays differ after the resume"
    assert any(k.startswith("optimizer") for k in want) and want["embeddings rows"].shape[0] > 1000
    lines = [[without_timing(r) for r in read_metrics(tmp_path / f"{name}.jsonl") if r["kind"] != "checkpoint"]
             for name in ("whole", "split")]
    assert lines[0] == lines[1] and len(lines[0]) == 5 + 3  # train records at 2, 4, 6, 8, 9; evals at 3, 6, 9
