"""The loss-scaled step of --precision fp16, run here on the CPU's fp32 compute with a scaler swapped in: a power
of two scale changes nothing, and an overflow skips the whole step, dense layers and embedding rows alike."""
import numpy as np

from gpuemb.optim import LossScaler
from gpuemb.train import Run, TrainConfig
from gpuemb.train.steps import ScaledStep, WholeStep


def config(**changes):
    base = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500,
                progress=False, steps=6, seed=2)
    return TrainConfig.from_dict({**base, **changes})


def rows(run):
    return {int(k): r for keys, rs, _ in run.tables["embeddings"].export() for k, r in zip(keys, rs)}


def steps(scaler, n=3):
    run = Run(config())
    run.trainer.kind = WholeStep() if scaler is None else ScaledStep(scaler)
    try:
        with run.batches as batches:
            losses = [run.trainer.train_step(next(batches)) for _ in range(n)]
        return losses, run.model.state_dict(), rows(run), run.trainer.state_dict()
    finally:
        run.close()


def test_a_power_of_two_scale_trains_bit_for_bit_like_none():
    plain, scaled = steps(None), steps(LossScaler(init_scale=2.0 ** 12, growth_interval=2))
    assert plain[0] == scaled[0]
    for a, b in ((plain[1], scaled[1]), (plain[2], scaled[2])):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert scaled[3]["scaler"]["scale"] == 2.0 ** 13  # it grew after two clean steps, and a checkpoint keeps it


def test_an_overflow_skips_the_dense_step_and_the_row_updates():
    run = Run(config())
    run.trainer.kind = ScaledStep(scaler := LossScaler(init_scale=1.0))
    try:
        with run.batches as batches:
            run.trainer.train_step(next(batches))
            dense, table = run.model.state_dict(), rows(run)
            scaler.loss_scale = 2.0 ** 130  # loss × 2**130 is inf in float32
            with np.errstate(over="ignore", invalid="ignore"):
                run.trainer.train_step(next(batches))
            assert all(np.array_equal(dense[k], v) for k, v in run.model.state_dict().items())
            after = rows(run)
            assert len(table) > 100 and all(np.array_equal(table[k], after[k]) for k in table)
            assert run.tables["embeddings"].in_flight.pinned == 0
            assert (scaler.steps_skipped, scaler.loss_scale, run.step) == (1, 2.0 ** 129, 2)
    finally:
        run.close()
