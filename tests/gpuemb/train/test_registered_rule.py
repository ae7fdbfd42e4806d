"""A row rule defined here alone, registered by name, trains a run config: the registries are the choices."""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.backend import get_array_module, to_host
from gpuemb.optim import UpdateRule
from gpuemb.train import Run, TrainConfig
from gpuemb.train.cli import parse_config


@dataclass(frozen=True)
class SignSGDRule(UpdateRule, name="test_signsgd"):
    """``w -= lr · sign(g)``: every touched weight moves by exactly lr, whatever its gradient's size."""
    weight_decay: float = 0.0

    def update(self, param, grad, state, lr, step):
        param -= lr * get_array_module(param).sign(grad)


def rows_after_one_step(embedding_lr):
    config = TrainConfig.of(embedding_optimizer="test_signsgd", embedding_lr=embedding_lr, steps=1, batch_size=64,
                            embedding_dim=4, eval_rows=64, train_rows=512, progress=False, seed=3,
                            model_args={"bottom": [8], "top": [8]})
    run = Run(config)
    try:
        with run.pipeline as pipeline:
            pipeline.step(ahead=False)
        table, = run.tables.values()
        pieces = [(to_host(k), to_host(r)) for k, r, _ in table.export()]
        keys, rows = np.concatenate([k for k, _ in pieces]), np.concatenate([r for _, r in pieces])
        return dict(zip(keys.tolist(), rows[:, :4]))
    finally:
        run.close()


def test_a_rule_registered_in_a_test_file_is_a_choice_of_the_flags():
    assert parse_config(["--embedding-optimizer", "test_signsgd"]).optimization.embedding_optimizer == "test_signsgd"


def test_a_rule_registered_in_a_test_file_trains_by_name():
    big, small = rows_after_one_step(0.5), rows_after_one_step(0.25)
    assert big.keys() == small.keys() and len(big) > 100
    # the same first forward, so the same gradient signs: the rows differ by 0.25 · sign(g), exactly
    diff = np.abs(np.stack([big[k] - small[k] for k in big]))
    assert np.all((np.abs(diff - 0.25) < 1e-6) | (diff == 0))
    assert np.mean(np.abs(diff - 0.25) < 1e-6) > 0.9
