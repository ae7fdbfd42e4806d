"""tools/train.py --deterministic on 1, 2 and 4 ranks under a real ``mpiexec`` on the CPU: the same train losses, eval
metrics, dense weights and embedding rows, bit for bit; and the launches it refuses, with one line a rank."""
import json
from pathlib import Path

import numpy as np
import pytest

from gpuemb.store.snapshot import read_snapshot
from gpuemb.train import ConfigError, TrainConfig
from gpuemb.train import checkpoint as ckpt
from gpuemb.train.cluster import Cluster

TRAIN = Path(__file__).resolve().parents[2] / "tools" / "train.py"
pytestmark = pytest.mark.slow
TINY = ["--deterministic", "--batch-size", "32", "--embedding-dim", "8", "--steps", "2", "--log-every", "1",
        "--eval-every", "1", "--eval-rows", "72", "--no-progress", "--model-arg", "bottom=[16]", "--model-arg",
        "top=[32, 16]"]


@pytest.fixture
def launch(mpi_run):
    """``launch(n, *args)``: tools/train.py on ``n`` ranks (``n = 1``: plain python, no launcher), finished."""
    return lambda n, *args: mpi_run(n, TRAIN, *args, timeout_s=600, GPUEMB_COMM_TIMEOUT="120")


def outcome(folder):
    """What a run left: its metrics records without timings, its dense weights, and every table's rows by key."""
    # differ by rank or folder; "tables" holds rank 0's own stores, which hold other rows on other world sizes, and
    # an eval record's reads are rank 0's part of the eval set
    skip = ("transfers", "transfers_ahead", "launches", "comm_bytes_per_step", "path", "tables", "hit_rate",
            "rows_read", "bytes_read")
    metrics = [{k: v for k, v in r.items() if not k.endswith("_s") and k not in skip}
               for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())]
    step, _ = ckpt.find_resume(folder / "ckpt")
    weights = ckpt.read_state(step)["trainer"]["model"]
    tables = {}
    for path in sorted(Path(step).glob("embeddings*.h5")):
        for name, table in read_snapshot(path).tables.items():
            got = table.load_all()
            tables.setdefault(name, []).append((got.keys, got.rows, got.steps))
    rows = {}
    for name, parts in tables.items():  # the shards of a row-wise table hold disjoint keys; some hold none
        parts = [part for part in parts if part[0].size] or parts[:1]
        keys, values, steps = (np.concatenate(p) for p in zip(*parts))
        order = np.argsort(keys)
        rows[name] = (keys[order], values[order], steps[order])
    return metrics, weights, rows


@pytest.mark.parametrize("extra", [["--tables", "per-feature"],
                                   ["--tables", "shared", "--sharding", "row", "--model-arg", "dropout=0.3"]],
                         ids=["per-feature", "shared-row-dropout"])
def test_one_two_and_four_ranks_train_the_same_bits(extra, rng, tmp_path, launch):
    seed = str(rng.integers(1 << 20))
    runs = {}
    for n in (1, 2, 4):
        folder = tmp_path / f"n{n}"
        out = launch(n, *TINY, *extra, "--seed", seed, "--metrics-out", folder / "metrics.jsonl",
                     "--checkpoint-dir", folder / "ckpt")
        assert out.returncode == 0, out.stdout + out.stderr
        runs[n] = outcome(folder)
    metrics, weights, rows = runs[1]
    assert [r["kind"] for r in metrics] == ["train", "eval"] * 2 + ["checkpoint"]
    assert all(np.isfinite(r["loss"]) for r in metrics if r["kind"] == "train")
    assert sum(k.size for k, _, _ in rows.values()) > 0 and weights
    for n in (2, 4):
        other_metrics, other_weights, other_rows = runs[n]
        assert other_metrics == metrics, n  # losses, AUC, log-loss and accuracy compared as floats: exactly
        assert other_weights.keys() == weights.keys()
        for name, w in weights.items():
            np.testing.assert_array_equal(other_weights[name], w, err_msg=f"{name} on {n} ranks")
        assert other_rows.keys() == rows.keys()
        for name, (keys, values, steps) in rows.items():
            for mine, theirs in zip((keys, values, steps), other_rows[name]):
                np.testing.assert_array_equal(theirs, mine, err_msg=f"table {name} on {n} ranks")


@pytest.mark.parametrize("n, flags, says", [
    (2, ["--deterministic", "3", "--batch-size", "36"], "--deterministic: 3 micro-slices do not split over 2 ranks"),
    (1, ["--batch-size", "30"], "--batch-size: 30 samples do not split into the 4 micro-slices of --deterministic"),
    (2, ["--sharding", "column"], "--deterministic: table embeddings is split by columns under rowwise_adagrad"),
])
def test_a_launch_it_cannot_make_deterministic_exits_2_with_one_line_per_rank(n, flags, says, launch):
    out = launch(n, *TINY, *flags)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count(says) == n and out.stderr.count("\n") <= n, out.stderr


def test_a_loss_scaled_fp16_step_is_refused():
    # fp16 needs a GPU, so this is the check itself rather than a launch: the scaler skips steps by what overflowed
    with pytest.raises(ConfigError, match="--deterministic: --precision fp16 scales the loss"):
        Cluster.of(None, TrainConfig.of(deterministic=4, precision="fp16"))
