"""Collections of tables of several dims (``mixed_dims``) shard: a world of one against ``EmbeddingCollection``;
under ``mpiexec`` (2 and 3 ranks, workers/mixed_dims.py) table-, row- and column-wise against one process; and
tools/train.py's DCN with per-feature dims on 2 ranks against one process, its checkpoints resuming in the other
world size."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpuemb import comm, models
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.distributed import ShardedEmbeddingCollection, distribute, plan_for
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig

TRAIN = Path(__file__).resolve().parents[3] / "tools" / "train.py"
CONFIGS = [TableConfig(f"t{i}", d, initializer=Initializer("uniform", seed=i + 1)) for i, d in enumerate((4, 8, 16))]
DCN = ["--model", "dcn", "--batch-size", "256", "--eval-rows", "2000", "--no-progress", "--tables", "per-feature",
       "--embedding-dim", "4", "--table-dim", "C1=8", "--table-dim", "C2=16"]


def test_a_world_of_one_gives_the_rows_side_by_side(rng):
    ref = EmbeddingCollection(CONFIGS, mode="max", mixed_dims=True)
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), plan_for(CONFIGS, 1), mode="max",
                                     mixed_dims=True)
    assert (one.dims, one.width) == ((4, 8, 16), 28)
    for sparse in (rng.integers(0, 30, (5, 3)), [(rng.integers(0, 30, 7), np.array([0, 2, 2, 3, 6, 7]))] * 3):
        want, got = ref(sparse), one(sparse)
        np.testing.assert_array_equal(got.data, want.data)
        gy = rng.standard_normal(want.shape).astype(np.float32)
        want.backward(gy)
        got.backward(gy)
    for table in ref.tables:
        keys, rows, _ = map(np.concatenate, zip(*table.export()))
        got_keys, got_rows, _ = map(np.concatenate, zip(*one.shards[table.config.name].table.export()))
        np.testing.assert_array_equal(got_rows[np.argsort(got_keys)], rows[np.argsort(keys)])


@pytest.mark.gpu
def test_a_world_of_one_of_several_dims_on_the_device(rng):
    """The output's gather and the gradient's scatter on device arrays, against the collection on the device."""
    ref = EmbeddingCollection(CONFIGS, mixed_dims=True)
    one = ShardedEmbeddingCollection(CONFIGS, comm.LocalCommunicator(), plan_for(CONFIGS, 1), mixed_dims=True)
    sparse = rng.integers(0, 30, (5, 3))
    want, got = ref(sparse), one(sparse)
    np.testing.assert_array_equal(to_host(got.data), to_host(want.data))
    gy = to_device(rng.standard_normal(want.shape).astype(np.float32))
    want.backward(gy)
    got.backward(gy)
    np.testing.assert_array_equal(to_host(one(sparse).data), to_host(ref(sparse).data))


def test_distribute_keeps_a_models_tables_of_several_dims():
    model = models.build("dcn", 3, CONFIGS, seed=0)
    distribute(model, comm.LocalCommunicator())
    assert isinstance(model.embeddings, ShardedEmbeddingCollection) and model.embeddings.dims == (4, 8, 16)


@pytest.mark.slow
@pytest.mark.parametrize("ranks, overlapped", [(2, ()), (3, ()), (2, ("overlapped",))])
def test_tables_of_several_dims_shard_every_way_like_one_process(ranks, overlapped, rng, mpiexec):
    mpiexec(ranks, "mixed_dims.py", rng.integers(1 << 30), *overlapped)


def records(path, kind):
    return [r for r in map(json.loads, Path(path).read_text().splitlines()) if r["kind"] == kind]


def summary(out):
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"^done: .* eval AUC ([\d.]+).*log-loss ([\d.]+)", out.stdout.strip().splitlines()[-1])
    assert found, out.stdout
    return float(found[1]), float(found[2])


@pytest.fixture
def launch(mpi_run):
    return lambda n, *args: mpi_run(n, TRAIN, *args, timeout_s=300, GPUEMB_COMM_TIMEOUT="60")


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["table", "row", "column"])
def test_train_py_dcn_of_several_dims_on_two_ranks_trains_as_one_process_bit_for_bit(sharding, tmp_path, launch):
    """Under --deterministic, exactly; without it, the ranks' dense matmuls of other heights round apart, and DCN's
    cross layers grow that to about 1e-5 of the loss in 4 steps here (the same run with one dim: 1e-7)."""
    args = ["--steps", "4", "--log-every", "1", "--eval-every", "2", "--deterministic", "4", *DCN]
    if sharding == "column":  # row-wise Adagrad's column shards add their sums in rank order: refused
        args += ["--embedding-optimizer", "adagrad"]
    summary(launch(1, *args, "--metrics-out", tmp_path / "one.jsonl"))
    summary(launch(2, *args, "--sharding", sharding, "--metrics-out", tmp_path / "two.jsonl"))
    for kind in ("train", "eval"):
        one, two = (records(tmp_path / f, kind) for f in ("one.jsonl", "two.jsonl"))
        fields = ("loss",) if kind == "train" else ("auc", "log_loss", "accuracy")
        assert len(one) == len(two) > 0
        assert [[r[f] for f in fields] for r in one] == [[r[f] for f in fields] for r in two], (one, two)


@pytest.mark.slow
@pytest.mark.parametrize("saved, resumed", [(2, 1), (1, 2)])
def test_a_checkpoint_of_several_dims_resumes_in_another_world_size(saved, resumed, tmp_path, launch):
    """Saved split by columns, resumed split by rows (or whole), under --deterministic: the straight run's AUC and
    log-loss, as its summary line prints them."""
    same = [*DCN, "--deterministic", "4", "--embedding-optimizer", "adagrad"]
    args = [*same, "--checkpoint-dir", tmp_path / "ckpt"]
    summary(launch(saved, "--steps", "3", "--sharding", "column", *args))
    resumed_run = summary(launch(resumed, "--steps", "6", "--sharding", "row", "--resume", *args))
    assert resumed_run == summary(launch(1, "--steps", "6", *same))
