"""The data of a run: synthetic rows with their teacher, shard folders, and raw files converted with a split."""
import os
import pathlib
import shutil

import numpy as np
import pytest

from gpuemb.io import dataset_manifest
from gpuemb.io.errors import UnlistedShardWarning
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


def test_a_raw_file_without_its_format_is_one_line_asking_for_it(tmp_path):
    raw = tmp_path / "clicks.csv"
    raw.write_text("y,a,c\n1,0.5,x\n")
    for eval_data in (None, str(raw)):
        with pytest.raises(ConfigError) as err:
            opened(tmp_path, data=str(raw), eval_data=eval_data)
        assert str(err.value) == (f"--data {raw}: is a file, not HDF5 shards; give its --format (criteo, avazu, "
                                  "census, csv, parquet) to convert it, or give the converter's output folder")


def test_raw_files_are_converted_into_a_listed_folder_and_checked(tmp_path, monkeypatch):
    crc, read = dataset_manifest.file_crc, []

    def reading(path, sync=False):
        read.append((path, sync))
        return crc(path, sync)

    monkeypatch.setattr(dataset_manifest, "file_crc", reading)
    data = opened(tmp_path, data=str(DATA / "criteo_sample.tsv"), format="criteo", eval_fraction=0.25, seed=3)
    try:
        paths = [info.path for info in data.train.infos + data.eval.infos]
        assert sorted(p for p, sync in read if not sync) == sorted(paths)  # each checked against its manifest entry
        assert sorted(p for p, sync in read if sync) == sorted(paths)  # as the converter listed it
        assert dataset_manifest.read(pathlib.Path(paths[0]).parent).complete
    finally:
        data.close()


def test_a_shard_folder_with_a_shard_missing_or_another_conversions_split_is_one_line(tmp_path):
    for name in ("one", "two"):
        write_synthetic(TINY, tmp_path / name, {"train": 2000, "test": 500}, WriteOptions(250, 500))
    one = tmp_path / "one"
    os.remove(one / "train" / "part-00002.h5")
    with pytest.raises(ConfigError, match=f"^--data: {one}/train/part-00002.h5: is missing \\(1 of the 4 shards "):
        opened(tmp_path, data=str(one))
    two = tmp_path / "two"
    shutil.rmtree(two / "test")
    shutil.copytree(one / "test", two / "test")
    with pytest.raises(ConfigError, match=f"^--data: {two}/test: is from another conversion than {two}/train"):
        opened(tmp_path, data=str(two))


def test_a_shard_folder_converted_before_manifests_still_trains_with_a_warning(tmp_path):
    written = write_synthetic(TINY, tmp_path / "shards", {"train": 1000, "test": 500})
    for split in ("train", "test"):
        os.remove(tmp_path / "shards" / split / "manifest.json")
    with pytest.warns(UnlistedShardWarning, match="have no manifest.json \\(converted before manifests\\)"):
        data = opened(tmp_path, data=str(tmp_path / "shards"))
    try:
        got = data.train.read_block(0)
        want = generate(TINY, 0, 1000, "train")[0]
        np.testing.assert_array_equal(got.sparse, want.sparse[:got.rows])
        assert data.teacher_auc == written["test"][1]
    finally:
        data.close()
