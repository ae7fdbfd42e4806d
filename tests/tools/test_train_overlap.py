"""tools/train.py --overlap-comm under a real ``mpiexec`` on the CPU: the collectives on a thread of their own, the
next batch's key exchange during each step and the dense allreduce during the backward, give the same train losses,
eval metrics, dense weights and rows, bit for bit, as the same run without them, with and without --deterministic,
and under --precision fp16 (on the emulated device: fp16 runs on a device only)."""
import pytest

from gpuemb.autograd import backend

from .test_train_deterministic import TINY, TRAIN, launch, outcome  # noqa: F401  (launch: a fixture)

pytestmark = pytest.mark.slow
# fp16's loss-scaled step (its buckets during the backward, its loss's mean checked after it) computes on a device
# only: the emulation pass of .ci/run runs it, 2 ranks over NCCL on the emulated device, at batches of 8 (the
# simulator's time goes with the batch: 2 to 3 minutes a run at 32); a machine of one real GPU cannot give each
# rank its own
EMULATED = [pytest.mark.gpu, pytest.mark.skipif(backend.real_gpu(), reason="2 ranks on the emulated device")]
SMALL = ["--batch-size", "8", "--eval-rows", "16"]  # the last of a repeated flag wins


@pytest.mark.parametrize("n, extra", [
    (2, ["--deterministic", "--tables", "per-feature"]),
    (4, ["--deterministic", "--tables", "per-feature"]),
    (2, ["--tables", "per-feature", "--sharding", "row"]),
    (4, ["--tables", "per-feature"]),
    pytest.param(2, ["--tables", "per-feature", "--device", "emulated", "--precision", "fp16", *SMALL],
                 marks=EMULATED),
], ids=["2-deterministic", "4-deterministic", "2-row", "4", "2-fp16"])
def test_the_overlapped_run_trains_the_blocking_runs_bits(n, extra, rng, tmp_path, launch, mpi_run):
    # 4 steps, evaluated after the last: steps 1 and 2 start the next batch's key exchange (none is started across an
    # evaluation or a checkpoint, as the prefetch is not)
    seed, base = str(rng.integers(1 << 20)), [a for a in TINY if a != "--deterministic"] + ["--steps", "4",
                                                                                              "--eval-every", "4"]
    runs = {}
    for overlap in (False, True):
        folder = tmp_path / f"overlap{overlap}"
        args = (*base, *extra, "--seed", seed, "--metrics-out", folder / "metrics.jsonl", "--checkpoint-dir",
                folder / "ckpt", *(["--overlap-comm"] if overlap else []))
        out = (mpi_run(n, TRAIN, *args, timeout_s=600, GPUEMB_COMM_TIMEOUT="120", GPUEMB_DEVICE="emulated")
               if "emulated" in extra else launch(n, *args))
        assert out.returncode == 0, out.stdout + out.stderr
        assert (", overlapped); " in out.stdout) == overlap, out.stdout  # the startup line says so (mpi, or nccl)
        runs[overlap] = outcome(folder)
    (metrics, weights, rows), (o_metrics, o_weights, o_rows) = runs[False], runs[True]
    assert [r["kind"] for r in metrics].count("train") == 4
    assert o_metrics == metrics
    assert o_weights.keys() == weights.keys() and o_rows.keys() == rows.keys()
    for name, w in weights.items():
        assert (o_weights[name] == w).all(), name
    for name, parts in rows.items():
        for mine, theirs in zip(parts, o_rows[name]):
            assert (theirs == mine).all(), name


def test_a_diverging_overlapped_run_stops_every_rank_at_the_same_step(launch):
    """With --overlap-comm the loss's mean travels during the backward and is checked after it (train/steps.py):
    every rank still stops at the same step, in one line each, and none waits out the communication timeout."""
    out = launch(2, *[a for a in TINY if a != "--deterministic"], "--steps", "6", "--eval-every", "6",
                 "--embedding-lr", "1e38", "--overlap-comm")
    assert out.returncode != 0
    said = sorted(line.split("): ", 1) for line in out.stderr.splitlines() if line.startswith("train.py: error"))
    assert [rank for rank, _ in said] == ["train.py: error (rank 0 of 2", "train.py: error (rank 1 of 2"], out.stderr
    assert said[0][1] == said[1][1] and ("holds NaN or inf" in said[0][1] or "the loss became" in said[0][1])
    assert "did not complete within" not in out.stderr, out.stderr
