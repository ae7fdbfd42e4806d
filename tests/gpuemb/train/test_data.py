"""The data of a run: synthetic rows with their teacher, shard folders, and raw files converted with a split."""
import pathlib

import numpy as np
import pytest

from gpuemb.io.shards import WriteOptions
from gpuemb.io.synthetic import SyntheticConfig, generate, teacher_auc, write_synthetic
from gpuemb.train.config import TrainConfig
from gpuemb.train.data import QUICK, open_data
from gpuemb.train.errors import ConfigError

DATA = pathlib.Path(__file__).resolve().parents[2] / "io" / "data"
TINY = SyntheticConfig(n_dense=3, cardinalities=(100, 20, 5), seed=4)


def opened(tmp_path, train_rows=1000, **values):
    return open_data(TrainConfig.from_dict(values), str(tmp_path), train_rows)


def test_synthetic_data_is_the_quick_preset_with_the_seed_and_its_teacher(tmp_path):
    data = opened(tmp_path, 5000, seed=7, eval_rows=4000)
    assert (data.n_dense, data.n_features, data.n_tasks, data.synthetic) == (13, 26, 1, True)
    assert (data.train.n_rows, data.eval.n_rows, data.eval.split) == (5000, 4000, "test")
    cfg = data.train.config
    assert cfg.seed == 7 and cfg.cardinalities == QUICK.cardinalities and max(cfg.cardinalities) <= 1000
    assert data.teacher_auc == teacher_auc(cfg, 4000, "test")
    np.testing.assert_array_equal(data.eval.read_block(0).sparse, generate(cfg, 0, 4000, "test")[0].sparse)


def test_a_shard_folder_trains_on_train_and_evaluates_on_test(tmp_path):
    written = write_synthetic(TINY, tmp_path / "shards", {"train": 3000, "test": 1000}, WriteOptions(500, 1000))
    data = opened(tmp_path, data=str(tmp_path / "shards"))
    try:
        assert (data.train.n_rows, data.eval.n_rows, data.n_dense, data.n_features) == (3000, 1000, 3, 3)
        assert data.teacher_auc == written["test"][1] and not data.synthetic  # read from the shards' meta
        assert data.sparse_names == ("C1", "C2", "C3")
    finally:
        data.close()


def test_shards_without_an_eval_split_ask_for_eval_data(tmp_path):
    write_synthetic(TINY, tmp_path / "shards", {"train": 1000})
    with pytest.raises(ConfigError, match="holds no 'test' or 'val' folder.*--eval-data"):
        opened(tmp_path, data=str(tmp_path / "shards"))
    with pytest.raises(ConfigError, match="without a 'train' folder; give the eval shards with --eval-data"):
        opened(tmp_path, data=str(tmp_path / "shards" / "train"))
    data = opened(tmp_path, data=str(tmp_path / "shards" / "train"), eval_data=str(tmp_path / "shards" / "train"))
    assert data.eval.n_rows == 1000
    data.close()


def test_multi_hot_shards_train_with_their_hotness(tmp_path):
    """Shards of fixed-hotness features open with their hotness, and a model built on them pools each feature's
    keys: one training step moves exactly the rows of the keys it saw."""
    from gpuemb.train import Run, TrainConfig

    multi = SyntheticConfig(n_dense=2, cardinalities=(50, 50), hotness=(1, 3), seed=1)
    write_synthetic(multi, tmp_path / "shards", {"train": 500, "test": 500})
    data = opened(tmp_path, data=str(tmp_path / "shards"))
    assert data.hotness == (1, 3) and data.n_features == 2
    data.close()
    run = Run(TrainConfig.from_dict({"data": str(tmp_path / "shards"), "batch_size": 64, "steps": 1,
                                     "progress": False, "tables": "per-feature", "embedding_dim": 4}))
    try:
        assert run.model.embeddings.hotness == (1, 3)
        with run.batches as batches:
            batch = next(batches)
            run.trainer.train_step(batch)
        sparse = batch.sparse
        seen = [np.unique(sparse[:, :1]), np.unique(sparse[:, 1:])]
        for table, keys in zip(run.model.embeddings.tables, seen):
            assert sorted(k for ks in table.keys() for k in ks.tolist()) == keys.tolist()
    finally:
        run.close()


def test_raw_criteo_files_are_converted_with_a_held_out_split(tmp_path):
    data = opened(tmp_path, data=str(DATA / "criteo_sample.tsv"), format="criteo", eval_fraction=0.25, seed=3)
    try:
        n_train, n_eval = data.train.n_rows, data.eval.n_rows
        assert n_train + n_eval == 200 and 25 <= n_eval <= 75  # a seeded hash split, about a quarter held out
        assert (data.n_dense, data.n_features, data.teacher_auc) == (13, 26, None)
        assert str(tmp_path) in data.train.infos[0].path  # converted under the run's folder
    finally:
        data.close()


def test_mmoe_defaults_to_the_census_sample_with_two_tasks(tmp_path):
    data = opened(tmp_path, model="mmoe")
    try:
        assert data.label_names == ("marital_status", "income") and data.n_tasks == 2
        assert data.train.n_rows + data.eval.n_rows == 200
    finally:
        data.close()


def test_a_missing_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="--data: .*nowhere does not exist"):
        opened(tmp_path, data=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="nowhere.tsv is not a file"):
        opened(tmp_path, data=str(tmp_path / "nowhere.tsv"), format="criteo")
