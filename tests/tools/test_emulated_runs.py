"""tools/train.py on the emulated CUDA device against the same run on the CPU (issue 14, item 2).

Each run is a fresh process (the device is chosen at import): the CPU one with ``--device cpu``, the emulated one
with ``--device emulated``, which runs the GPU code paths (device arrays, the numba.cuda kernels in numba's
simulator, cuBLASLt's epilogues and NCCL emulated). The shapes are tiny, because the simulator runs a kernel one
thread at a time. Losses agree within 1e-5 relative and AUCs within 1e-4; a step's own crossings stay within the
device store's budget (one read of the loss), while the loader's thread uploads the batches.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from gpuemb.autograd import backend
from gpuemb.io.shards import ShardWriter, WriteOptions

from .test_train_jagged import LAYOUT, planted_rows

TRAIN = Path(__file__).resolve().parents[2] / "tools" / "train.py"
# the emulation pass of .ci/run: these count the emulated device's own launches and run its NCCL on 2 ranks, which
# a one-GPU machine cannot (a rank a GPU); there, tools/gpu_steps.py (tools/gpu_report.sh) trains every model
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(backend.real_gpu(), reason="runs tools/train.py on the emulated "
                                                  "device; a real GPU runs tools/gpu_steps.py instead")]
# The simulator runs a Python thread per CUDA thread, so a run's time goes with its batch: 16 rows, not 32, halved it.
TINY = ["--embedding-dim", "8", "--batch-size", "16", "--train-rows", "512", "--eval-rows", "32", "--steps", "2",
        "--log-every", "1", "--eval-every", "2", "--no-progress", "--seed", "3"]
MODELS = {"dlrm": ["--model", "dlrm", "--model-arg", "bottom=[16]", "--model-arg", "top=[16,8]"],
          "dcn": ["--model", "dcn", "--model-arg", "n_cross=2", "--model-arg", "deep=[16,8]"]}


def run(mpi_run, tmp_path, name, device, *args, ranks=1, base=TINY):
    """The records of ``tools/train.py`` on ``device``, after it ended well."""
    metrics = tmp_path / f"{name}.jsonl"
    out = mpi_run(ranks, TRAIN, "--device", device, *base, *args, "--metrics-out", metrics, timeout_s=600,
                  GPUEMB_DEVICE=device, GPUEMB_COMM_TIMEOUT="120")
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def assert_same_run(cpu, emulated):
    """Losses within 1e-5 relative and eval metrics within 1e-4, step by step."""
    pairs = [(a, b) for a, b in zip(cpu, emulated) if a["kind"] in ("train", "eval")]
    assert len(pairs) == sum(r["kind"] in ("train", "eval") for r in cpu) > 0
    for a, b in pairs:
        assert (a["kind"], a["step"]) == (b["kind"], b["step"])
        if a["kind"] == "train":
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-5), (a, b)
        else:
            assert b["auc"] == pytest.approx(a["auc"], abs=1e-4), (a, b)
            assert b["log_loss"] == pytest.approx(a["log_loss"], rel=1e-4), (a, b)


STORES = {"device": ["--store", "device"],
          "host-cache": ["--store", "host", "--cache-rows", "4000"],
          "ssd": ["--store", "ssd", "--cache-rows", "4000", "--host-cache-rows", "8000"]}


@pytest.mark.parametrize("model, store", [("dlrm", "device"), ("dcn", "host-cache"), ("dlrm", "ssd")])
def test_a_tiny_run_on_the_emulated_device_equals_the_cpu_run(model, store, mpi_run, tmp_path):
    args = [*MODELS[model], *STORES[store]]
    if store == "ssd":
        args += ["--ssd-dir", tmp_path / "ssd"]
    cpu = run(mpi_run, tmp_path, "cpu", "cpu", *args)
    emulated = run(mpi_run, tmp_path, "emulated", "emulated", *args)
    assert_same_run(cpu, emulated)
    trains = [r for r in emulated if r["kind"] == "train"]
    # the loader's thread sent the batches up, some ahead of the steps: the device path ran
    assert sum(r["transfers_ahead"]["to_device"] for r in trains) >= 1, trains
    if store == "device":  # the step's own crossings; the first step also sizes the store's tiers (one read)
        first, *rest = trains
        assert first["transfers"]["to_device"] <= 1 and first["transfers"]["to_host"] <= 2, first
        for record in rest:  # then nothing up, and one read: the loss with its finite flag
            assert record["transfers"]["to_device"] == 0 and record["transfers"]["to_host"] == 1, record
    for record in trains:  # what the step's own thread launched, by phase, and its one read back, the loss's
        launched, phases = record["launches"], record["launches"]["by_phase"]
        assert launched["numba"] > 0 and launched["cupy"] > 0 and launched["cublaslt"] > 0, launched
        assert {"lookup", "mlp_forward", "loss", "mlp_backward", "embedding_backward", "dense_optimizer"} <= set(phases)
        assert phases["loss"]["readbacks"] == 1 and phases["mlp_forward"]["cublaslt"] > 0, phases
        assert launched["cupy"] == pytest.approx(sum(p["cupy"] for p in phases.values())), launched


def test_a_checkpoint_on_the_emulated_device_resumes_to_the_same_run(mpi_run, tmp_path):
    def args(folder):
        return [*MODELS["dlrm"], "--checkpoint-dir", tmp_path / folder, "--checkpoint-every", "1"]
    whole = run(mpi_run, tmp_path, "whole", "emulated", *args("whole"))
    # from the whole run's first checkpoint, which it wrote before its second step, into a folder of its own
    first = tmp_path / "whole" / "step-000000001"
    assert (first / "manifest.json").exists(), sorted(p.name for p in first.parent.iterdir())
    resumed = run(mpi_run, tmp_path, "resumed", "emulated", *args("parts"), "--resume", first)
    losses = [r["loss"] for r in whole if r["kind"] == "train"]
    assert len(losses) == 2
    assert [r["loss"] for r in resumed if r["kind"] == "train"] == losses[1:]  # bit for bit, as on the CPU
    assert_same_run(run(mpi_run, tmp_path, "cpu", "cpu", *args("cpu")), whole)


@pytest.mark.parametrize("overlap", [[], ["--overlap-comm", "--steps", "3", "--eval-every", "3"]],
                         ids=["blocking", "overlapped"])
def test_two_ranks_with_nccl_on_the_emulated_device_equal_mpi_on_the_cpu(overlap, mpi_run, tmp_path):
    """Overlapped (docs/distributed.md, "Overlap"): the rows arrive on device arrays, step 2 takes its keys sent
    during step 1, and the buckets go during the backward, over the emulated NCCL."""
    args = [*MODELS["dlrm"], "--tables", "per-feature", *overlap]
    cpu = run(mpi_run, tmp_path, "cpu", "cpu", *args, "--comm-backend", "mpi", ranks=2)
    emulated = run(mpi_run, tmp_path, "nccl", "emulated", *args, "--comm-backend", "nccl", ranks=2)
    assert_same_run(cpu, emulated)


def jagged_shards(tmp_path):
    """The arguments that train on a folder of jagged shards (train and test) with bags of 0 to 3 keys."""
    rng = np.random.default_rng(5)
    weights = rng.normal(0, 1, (4, 300))
    for split, n in (("train", 256), ("test", 64)):
        writer = ShardWriter(tmp_path / "shards" / split, LAYOUT, WriteOptions(chunk_rows=64, rows_per_shard=128))
        writer.append(planted_rows(n, rng, weights))
        writer.close()
    return [*MODELS["dlrm"], "--data", tmp_path / "shards", "--model-arg", "pooling=mean"]


JAGGED_BASE = [a for a in TINY if a not in ("--train-rows", "512")]  # shards have their own rows


def test_jagged_shards_on_the_emulated_device_equal_the_cpu_run(mpi_run, tmp_path):
    """Bags of any length (empty ones too) go up with the batch as JaggedFeatures and are pooled on the device."""
    args = jagged_shards(tmp_path)
    cpu = run(mpi_run, tmp_path, "cpu", "cpu", *args, base=JAGGED_BASE)
    emulated = run(mpi_run, tmp_path, "emulated", "emulated", *args, base=JAGGED_BASE)
    assert_same_run(cpu, emulated)
    trains = [r for r in emulated if r["kind"] == "train"]
    assert sum(r["transfers_ahead"]["to_device"] for r in trains) >= 1, trains  # the bags went up with the batch


def test_row_wise_bags_over_nccl_on_the_emulated_device_equal_mpi_on_the_cpu(mpi_run, tmp_path):
    """Two ranks, every table row-wise: the owners' partial means come back by NCCL's reduceScatter on device
    arrays, against the mpi backend's on the CPU."""
    args = [*jagged_shards(tmp_path), "--sharding", "row", "--tables", "per-feature"]
    cpu = run(mpi_run, tmp_path, "cpu", "cpu", *args, "--comm-backend", "mpi", ranks=2, base=JAGGED_BASE)
    nccl = run(mpi_run, tmp_path, "nccl", "emulated", *args, "--comm-backend", "nccl", ranks=2, base=JAGGED_BASE)
    assert_same_run(cpu, nccl)
