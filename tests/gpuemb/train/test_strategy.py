"""The step strategy is chosen once, from the flags, when the run is built: the step's kind and how it prepares the
next batch, for every combination of precision, --deterministic, --overlap-comm and world size."""
import pytest

from gpuemb.optim import LossScaler
from gpuemb.train import Run, TrainConfig
from gpuemb.train.ahead import Nothing, Prefetch
from gpuemb.train.steps import ScaledStep, SlicedStep, WholeStep
from gpuemb.train.strategy import AHEAD, STEPS, Strategy, choose

# (precision, --deterministic) -> the step's kind; fp16 with --deterministic is refused (Cluster)
KINDS = {("fp32", 0): "whole", ("bf16", 0): "whole", ("fp16", 0): "loss_scaled", ("fp32", 2): "sliced"}
# (tables whole, --overlap-comm, world size) -> how the next batch is prepared, with --pipeline
AHEADS = {(True, False, 1): "prefetch", (True, True, 1): "prefetch",  # one rank has no collectives to overlap
          (False, False, 1): "nothing", (False, True, 1): "nothing",  # --deterministic on one rank: sharded, local
          (False, False, 2): "nothing", (False, True, 2): "route_ahead"}


def config(**flags):
    return TrainConfig.of(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500,
                          progress=False, steps=4, seed=2, **flags)


@pytest.mark.parametrize("precision,deterministic", KINDS)
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("ranks", [1, 2])
def test_each_flag_combination_chooses_its_step_and_its_preparation(precision, deterministic, overlap, ranks):
    whole = ranks == 1 and not deterministic
    flags = dict(precision=precision, deterministic=deterministic, overlap_comm=overlap)
    assert choose(config(**flags), ranks) == Strategy(KINDS[precision, deterministic], AHEADS[whole, overlap, ranks])
    assert choose(config(pipeline=False, **flags), ranks) == Strategy(KINDS[precision, deterministic], "nothing")


def test_a_plan_on_one_rank_shards_the_tables_so_nothing_is_prefetched(tmp_path):
    assert choose(config(plan=str(tmp_path / "plan.json")), 1).ahead == "nothing"


def test_every_declared_choice_is_chosen_by_some_flags():
    chosen = {choose(config(precision=p, deterministic=d, overlap_comm=o), w) for p, d in KINDS
              for o in (False, True) for w in (1, 2)}
    assert {s.step for s in chosen} == STEPS.keys() and {s.ahead for s in chosen} == AHEAD.keys()


def test_the_names_build_their_objects():
    scaled = Strategy("loss_scaled", "nothing").build_step(cluster=None)
    assert isinstance(scaled, ScaledStep) and isinstance(scaled.scaler, LossScaler)
    assert type(Strategy("whole", "nothing").build_step(cluster=None)) is WholeStep
    assert type(Strategy("whole", "nothing").build_ahead(model=None)) is Nothing


@pytest.mark.parametrize("flags,kind,ahead", [({}, WholeStep, Prefetch), ({"pipeline": False}, WholeStep, Nothing),
                                              ({"deterministic": 2}, SlicedStep, Nothing)],
                         ids=["plain", "no-pipeline", "deterministic"])
def test_the_run_holds_the_chosen_objects_and_every_step_calls_the_same_one(flags, kind, ahead):
    run = Run(config(**flags))
    try:
        chosen = run.trainer.kind
        assert type(chosen) is kind and type(run.pipeline.ahead) is ahead
        if kind is SlicedStep:
            assert chosen.slices is run.cluster.slices
        calls = []

        def counted(*args):
            calls.append(args[0])
            return chosen(*args)
        run.trainer.kind = counted
        with run.pipeline as pipeline:
            for _ in range(3):
                pipeline.step()
        assert calls == [run.trainer] * 3
    finally:
        run.close()
