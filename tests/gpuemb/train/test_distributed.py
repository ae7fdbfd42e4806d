"""The parts of a run on several ranks that need no launcher: the flags, each rank's part of a global batch, and
the loss-scaled step that every rank skips when one rank's rows overflowed. tests/tools/test_train_mpi.py runs
tools/train.py under mpiexec."""
from types import SimpleNamespace

import numpy as np
import pytest

from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.synthetic import SyntheticConfig, SyntheticSource
from gpuemb.kernels import codecs
from gpuemb.optim import LossScaler
from gpuemb.train import ConfigError, Run, TrainConfig
from gpuemb.train.config import FIELDS, resume_differences
from gpuemb.train.cluster import Cluster
from gpuemb.train.loop import Batches
from gpuemb.train.steps import ScaledStep
from gpuemb.train.fields import choices_of


def cluster(rank, world_size, **flags):
    return Cluster(SimpleNamespace(rank=rank, world_size=world_size, name="fake"), TrainConfig.from_dict(flags))


def test_the_config_names_the_codecs_the_kernels_have():
    assert choices_of(FIELDS["comm_codec"]) == choices_of(FIELDS["comm_codec_backward"]) == tuple(codecs.CODECS)


def test_the_backward_codec_defaults_to_the_forward_one():
    assert cluster(0, 2, comm_codec="int8").codecs.backward == "int8"
    assert cluster(0, 2, comm_codec="int8", comm_codec_backward="bf16").codecs.backward == "bf16"


@pytest.mark.parametrize("key, value", [("comm_codec", "int4"), ("sharding", "data"), ("comm_backend", "gloo")])
def test_a_value_not_offered_is_refused_naming_the_flag(key, value):
    with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')}: '{value}' is not one of"):
        TrainConfig.from_dict({key: value})


def test_fp16_steps_refuse_column_shards_under_rowwise_adagrad():
    with pytest.raises(ConfigError, match="--sharding: column shards under rowwise_adagrad"):
        TrainConfig.from_dict({"precision": "fp16", "sharding": "column"})
    TrainConfig.from_dict({"precision": "fp16", "sharding": "column", "embedding_optimizer": "adagrad"})


def test_a_resume_may_change_the_codecs_the_backend_and_the_sharding():
    saved = TrainConfig.of().to_dict()
    now = TrainConfig.from_dict({"comm_codec": "int8", "comm_codec_backward": "fp16", "comm_backend": "mpi",
                                 "sharding": "row"})
    assert resume_differences(saved, now) == []


def test_a_batch_that_does_not_split_evenly_is_refused():
    cluster(0, 4).check_batch(4096)
    with pytest.raises(ConfigError, match="--batch-size: 4098 samples do not split evenly over 4 ranks"):
        cluster(0, 4).check_batch(4098)


def test_each_rank_reads_its_part_of_every_global_batch_and_the_global_position():
    source = SyntheticSource(SyntheticConfig(cardinalities=(50, 80), n_dense=2, seed=3), 1000, "train")
    loader = lambda r=0, w=1: Loader(source, LoaderConfig(64, shuffle=True, seed=1, rank=r, world_size=w))  # noqa: E731
    with Batches(loader()) as whole:
        want = [next(whole) for _ in range(3)]
    for rank in range(2):
        mine = Batches(loader(rank, 2))
        with mine as parts:
            got = [next(parts) for _ in range(3)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.sparse, w.sparse[rank * 32:(rank + 1) * 32])
        assert mine.state_dict()["position"] == 3 * 64


def table_rows(run):
    return {int(k): r.copy() for keys, rs, _ in run.tables["embeddings"].export() for k, r in zip(keys, rs)}


class OtherRankOverflowed:
    """A stand-in for a Cluster of one whose other (imagined) rank found inf in its row gradients."""
    world_size = 1
    grad_ready = None

    def __init__(self):
        self.allreduced = 0

    def allreduce(self):
        self.allreduced += 1

    def everywhere(self, ok):
        return False

    overlapped = False

    def start_mean(self, value):
        return lambda: value

    def begin_step(self):
        pass

    def settle(self):
        pass

    def end_step(self):
        pass


def test_a_loss_scaled_step_is_skipped_when_another_rank_overflowed():
    run = Run(TrainConfig.from_dict(dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64,
                                         eval_rows=500, progress=False, steps=3, seed=2)))
    try:
        with run.batches as batches:
            run.trainer.train_step(next(batches))  # the step that inserts the rows the next one would update
            batch = next(batches)
        scaler = LossScaler(init_scale=2.0 ** 8)
        run.trainer.kind, run.trainer.cluster = ScaledStep(scaler), OtherRankOverflowed()
        before = {k: v.copy() for k, v in run.model.state_dict().items()}
        rows = table_rows(run)
        run.trainer.train_step(batch)
        after, now = run.model.state_dict(), table_rows(run)
        assert all(np.array_equal(before[k], after[k]) for k in before)
        assert rows and all(np.array_equal(r, now[k]) for k, r in rows.items())
        assert scaler.steps_skipped == 1 and scaler.loss_scale == 2.0 ** 7
        assert run.trainer.cluster.allreduced == 1
    finally:
        run.close()
