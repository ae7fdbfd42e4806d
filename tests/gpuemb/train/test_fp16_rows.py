"""--embedding-dtype fp16: a short run with float16 embedding weights learns about as well as one with float32."""
import numpy as np
import pytest

from gpuemb.train import Run, TrainConfig, train


def config(dtype, **changes):
    base = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=8, batch_size=256, eval_rows=4000,
                progress=False, steps=200, seed=2, embedding_dtype=dtype)
    return TrainConfig.from_dict({**base, **changes})


def test_fp16_rows_reach_nearly_the_fp32_auc():
    auc = {dtype: train(config(dtype))["eval"]["auc"] for dtype in ("fp32", "fp16")}
    assert auc["fp32"] > 0.62, auc  # it learned: chance is 0.5
    assert abs(auc["fp16"] - auc["fp32"]) < 0.01, auc


def test_the_run_builds_float16_tables_on_any_store(tmp_path):
    run = Run(config("fp16", steps=2, store="ssd", cache_rows=8000, ssd_dir=str(tmp_path)))
    try:
        with run.batches as batches:
            run.trainer.train_step(next(batches))
        table = run.tables["embeddings"]
        rows = [r for _, r, _ in table.export()]
        assert table.config.dtype == "float16" and rows and all(r.dtype == np.float16 for r in rows)
    finally:
        run.close()


def test_checkpoints_of_fp16_tables_check_the_working_rows(tmp_path):
    """A float16 table stores its float32 optimizer state as 16-bit halves, which read as float16 can look like
    inf or NaN: an Adagrad accumulator of 1.0038 (bits 0x3F807C00) has a low half 0x7C00, float16's inf. The
    checkpoint's divergence check reads the working rows, so it writes such a table (it refused it after 12
    steps of --embedding-dtype fp16), and still refuses a row whose weights or state are truly not finite."""
    from gpuemb.optim import AdagradRule
    from gpuemb.store import EmbeddingTable, TableConfig
    from gpuemb.train.checkpoint import DivergedError, FiniteRows

    rng = np.random.default_rng(7)
    table = EmbeddingTable(TableConfig("t", 4, dtype="float16", rule=AdagradRule()))
    keys = rng.choice(1 << 40, 6, replace=False)
    working = np.concatenate([rng.standard_normal((6, 4)), np.full((6, 4), 0.0)], 1).astype(np.float32)
    working[:, 4:] = np.array([0x3F807C00], np.uint32).view(np.float32)[0]  # finite, an "inf" low half
    table.import_rows(keys, table.format.pack(working), np.ones(6, np.int32))
    stored = np.concatenate([r for _, r, _ in table.export()])
    assert not np.isfinite(stored).all()  # the trap: the stored row as float16
    exported = list(FiniteRows("t", table).export())
    np.testing.assert_array_equal(np.sort(np.concatenate([k for k, _, _ in exported])), np.sort(keys))
    for bad_column, value in ((1, np.nan), (5, np.inf)):  # a weight, then an accumulator
        broken = working.copy()
        broken[2, bad_column] = value
        table.import_rows(keys, table.format.pack(broken), np.ones(6, np.int32))
        with pytest.raises(DivergedError, match=f"key {keys[2]}"):
            list(FiniteRows("t", table).export())
