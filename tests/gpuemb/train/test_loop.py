"""The training step: the loss it reports, the learning rates it uses, and how it stops on NaN or inf."""
import h5py
import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.train import DivergedError, Run, TrainConfig, train
from gpuemb.train import checkpoint as ckpt_module


def config(tmp_path, **changes):
    base = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500,
                progress=False, steps=6, seed=2)
    return TrainConfig.from_dict({**base, **changes})


def bce(logits, labels):
    return np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits))))


def test_a_step_reports_the_loss_of_its_batch_before_it_updates(tmp_path):
    run = Run(config(tmp_path))
    try:
        with run.batches as batches:
            batch = next(batches)
            with no_grad():
                logits = run.model.eval()(batch.dense, batch.sparse).numpy().astype(np.float64)
            before = run.model.state_dict()
            loss = run.trainer.train_step(batch)
        assert loss == pytest.approx(bce(logits, batch.label), rel=1e-5)
        after = run.model.state_dict()
        assert all(not np.array_equal(before[k], after[k]) for k in before)  # every dense parameter moved
        assert (run.step, run.trainer.samples, run.model.training) == (1, 64, True)
    finally:
        run.close()


def test_the_embedding_lr_follows_the_dense_schedule(tmp_path):
    run = Run(config(tmp_path, schedule="warmup_poly", warmup_steps=4, lr=0.01, embedding_lr=0.3))
    try:
        table = run.tables["embeddings"]
        seen = []
        with run.batches as batches:
            for _ in range(4):
                run.trainer.train_step(next(batches))
                seen.append(table.lr)
        warmup = [0.01 * k / 4 for k in range(4)]  # lr of steps 0..3 (the update after k steps)
        np.testing.assert_allclose(seen, [0.3 * lr / 0.01 for lr in warmup], rtol=1e-12)
    finally:
        run.close()


def rows_by_key(table):
    return {int(k): r for keys, rows, _ in table.export() for k, r in zip(keys, rows)}


def test_a_nan_loss_stops_before_the_update_and_names_the_step(tmp_path):
    run = Run(config(tmp_path))
    try:
        with run.batches as batches:
            run.trainer.train_step(next(batches))
            run.model.top.layers[-1].bias.data[:] = np.nan  # as a blown-up update would leave it
            before = rows_by_key(run.tables["embeddings"])
            with pytest.raises(DivergedError, match=r"the loss became nan at step 2 \(lr 0.002"):
                run.trainer.train_step(next(batches))
        after = rows_by_key(run.tables["embeddings"])
        assert all(np.array_equal(after[k], row) for k, row in before.items())  # no row took a NaN gradient
        assert run.step == 1 and len(before) > 100
    finally:
        run.close()


@pytest.mark.filterwarnings("ignore:.*encountered in matmul:RuntimeWarning")
def test_divergence_keeps_the_last_good_checkpoint_and_says_what_to_try(tmp_path):
    ckpt = tmp_path / "ckpt"
    train(config(tmp_path, steps=2, checkpoint_dir=str(ckpt), optimizer="sgd", lr=0.01, embedding_optimizer="sgd"))
    with pytest.raises(DivergedError) as e:  # resumed with a learning rate that blows the rows up
        train(config(tmp_path, steps=30, checkpoint_dir=str(ckpt), checkpoint_every=1, resume="latest",
                     optimizer="sgd", lr=0.01, embedding_optimizer="sgd", embedding_lr=1e30))
    message = str(e.value)
    latest = (ckpt / "latest").read_text().strip()
    assert "NaN or inf" in message and "try a lower --lr (now 0.01) or --embedding-lr (now 1e+30)" in message
    assert f"the last good checkpoint is {ckpt / latest}" in message
    state = ckpt_module.read_state(ckpt / latest)  # it is whole, and holds finite numbers only
    assert all(np.isfinite(v).all() for v in state["trainer"]["model"].values())
    with h5py.File(ckpt / latest / "embeddings.h5") as f:
        assert np.isfinite(f["tables/embeddings/rows"][:]).all()
