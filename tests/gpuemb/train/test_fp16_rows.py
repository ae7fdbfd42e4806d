"""--embedding-dtype fp16: a short run with float16 embedding weights learns about as well as one with float32."""
import numpy as np

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
