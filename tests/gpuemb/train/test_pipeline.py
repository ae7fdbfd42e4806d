"""The pipelined loop (``--pipeline``, the default) trains bit for bit as the plain one, and really prefetches."""
import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.train import Reporter, TrainConfig, train
from gpuemb.train.run import Run

STEPS = 7


def config(tmp_path, **changes):
    base = dict(model_args={"dropout": 0.2, "top": [32, 16], "bottom": [16]}, embedding_dim=8, batch_size=128,
                eval_rows=2000, eval_every=5, steps=STEPS, progress=False, seed=5,
                metrics_out=str(tmp_path / f"m{len(list(tmp_path.iterdir()))}.jsonl"))
    return TrainConfig.from_dict({**base, **changes})


class Capture(Reporter):
    """The run's arrays as it ends: dense parameters, optimizer state, every table's rows by key, and how many
    prefetches the pipeline made or skipped."""

    def start(self, run):
        self.run = run

    def close(self):
        run = self.run
        self.arrays = {f"param {k}": v for k, v in run.model.state_dict().items()}
        for name, saved in run.optimizer.state_dict()["params"].items():
            self.arrays.update({f"optimizer {name} {k}": np.asarray(v) for k, v in saved.items()})
        for name, table in run.tables.items():
            keys, rows, steps = (np.concatenate(parts) for parts in zip(*table.export()))
            order = np.argsort(keys)
            self.arrays.update({f"{name} keys": keys[order], f"{name} rows": rows[order],
                                f"{name} steps": steps[order]})
        self.counts = (run.pipeline.prefetched, run.pipeline.skipped)


def both(tmp_path, **changes):
    """(pipelined, plain) captures of the same run."""
    on, off = Capture(), Capture()
    train(config(tmp_path, **changes), on)
    train(config(tmp_path, pipeline=False, **changes), off)
    return on, off


@pytest.mark.parametrize("store", [{}, {"store": "host", "cache_rows": 3000}, {"tables": "per-feature"},
                                   {"model": "deepfm", "model_args": {"deep": [16]}}],
                         ids=["device", "host", "per-feature", "first-order"])
def test_the_pipeline_changes_no_result(tmp_path, store):
    on, off = both(tmp_path, **store)
    assert on.arrays.keys() == off.arrays.keys() and len(on.arrays) > 10
    assert not [k for k in on.arrays if not np.array_equal(on.arrays[k], off.arrays[k])]
    # Steps 1-3 and 5-6 prepare the next batch (4 comes before the evaluation, 7 is the last): 5 of each store.
    # Per-feature tables are one store; deepfm's first-order weights are a collection, so a store, of their own.
    tables = len([k for k in on.arrays if k.endswith(" keys")])
    stores = 1 if store.get("tables") else tables
    assert on.counts == (5 * stores, 0) and off.counts == (0, 0)


def test_a_prefetch_that_might_not_fit_is_skipped_and_the_results_hold(tmp_path):
    # About 1,300 unique keys a batch: a cache of 2,000 rows holds one batch's pinned rows, not two.
    on, off = both(tmp_path, store="host", cache_rows=2000)
    assert on.counts == (0, 5)
    assert not [k for k in on.arrays if not np.array_equal(on.arrays[k], off.arrays[k])]


def test_a_lookup_takes_over_the_prefetched_keys_and_slots(tmp_path):
    run = Run(config(tmp_path, store="host", cache_rows=3000))
    try:
        with run.pipeline as pipeline:
            pipeline.step(ahead=True)
            pipeline._wait()
            (table, keys, _), = run.model.embeddings.table_keys(pipeline._ahead[0].sparse)
            level = table.top
            seen = level.hits + level.misses
            assert seen > 0 and len(table.in_flight.prefetched) == 1
            with no_grad():
                run.model.embeddings(pipeline._ahead[0].sparse)
            assert level.hits + level.misses == seen and not table.in_flight.prefetched  # no second acquire
            assert level.policy.n_pinned() == 0  # the no_grad lookup released the prefetch's pins
    finally:
        run.close()


def test_the_saved_position_is_the_last_batch_trained_not_the_one_taken_ahead(tmp_path):
    run = Run(config(tmp_path))
    try:
        plain = []
        with run.batches as batches:
            for _ in range(3):
                next(batches)
                plain.append(run.batches.state_dict())
    finally:
        run.close()
    run = Run(config(tmp_path))
    try:
        with run.pipeline as pipeline:
            for want in plain:
                pipeline.step(ahead=True)
                assert run.state_dict()["loader"] == want and pipeline._ahead is not None
    finally:
        run.close()
