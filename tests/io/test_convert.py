"""The converter: identical shards from the Criteo TSV and CSV, the layout, splits, threshold and caps."""
import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from gpuemb.io import criteo
from gpuemb.io.batch import Batch
from gpuemb.io.census import census_schema
from gpuemb.io.convert import ConvertOptions, ConvertReport, convert
from gpuemb.io.csv_reader import csv_schema
from gpuemb.io.criteo import criteo_schema, read_criteo
from gpuemb.io.errors import DataError, UnlistedShardWarning
from gpuemb.io.file_lock import DirLock
from gpuemb.io.hashing import rare_id
from gpuemb.io.schema import Schema
from gpuemb.io.shards import ShardSource, WriteOptions
from gpuemb.train.config import TrainConfig
from gpuemb.train.data import open_data

from .test_dataset_manifest import criteo_file

TOOL = Path(__file__).resolve().parents[2] / "tools" / "convert.py"


def load(paths):
    with ShardSource(paths) as src:
        return Batch.concat([src.read_block(i) for i in range(src.block_sizes.size)])


def test_criteo_tsv_and_csv_give_identical_shards(data, tmp_path):
    a = convert([data / "criteo_sample.tsv"], tmp_path / "tsv", criteo_schema())
    schema = csv_schema(data / "criteo_sample.csv", ["label"], criteo.DENSE, criteo.SPARSE, kind="hex")
    b = convert([data / "criteo_sample.csv"], tmp_path / "csv", schema)
    with h5py.File(a.paths["train"][0]) as fa, h5py.File(b.paths["train"][0]) as fb:
        for name in ("label", "dense", "sparse"):
            assert fa[name].shape[0] == 200
            np.testing.assert_array_equal(fa[name][()], fb[name][()])


def test_layout_is_plain_hdf5_with_schema_and_counts(data, tmp_path):
    report = convert([data / "criteo_sample.tsv"], tmp_path, criteo_schema(),
                     ConvertOptions(write=WriteOptions(chunk_rows=64, rows_per_shard=128)))
    paths = report.paths["train"]
    assert [p.rsplit("/", 1)[1] for p in paths] == ["part-00000.h5", "part-00001.h5"]
    with h5py.File(paths[1]) as f:
        assert f.attrs["n_rows"] == 72 and f.attrs["chunk_rows"] == 64
        assert f["label"].dtype == np.float32 and f["label"].shape == (72,)
        assert f["dense"].shape == (72, 13) and f["dense"].chunks == (64, 13)
        assert f["sparse"].dtype == np.int64 and f["sparse"].shape == (72, 26)
        assert json.loads(f.attrs["sparse_names"])[0] == "C1"
        meta = json.loads(f.attrs["meta"])
        assert Schema.from_json(meta["schema"]) == criteo_schema()
    whole = Batch.concat(list(read_criteo(data / "criteo_sample.tsv")))
    np.testing.assert_array_equal(load(paths).sparse, whole.sparse)
    assert report.rows == {"train": 200} and report.rows_per_s > 0 and "200 rows read" in str(report)


def test_ratio_split_partitions_the_rows_the_same_way_each_run(data, tmp_path):
    opts = ConvertOptions(split=(0.6, 0.2, 0.2), seed=3)
    report = convert([data / "criteo_sample.tsv"], tmp_path / "a", criteo_schema(), opts)
    again = convert([data / "criteo_sample.tsv"], tmp_path / "b", criteo_schema(), opts)
    other = convert([data / "criteo_sample.tsv"], tmp_path / "c", criteo_schema(),
                    ConvertOptions(split=(0.6, 0.2, 0.2)))
    assert sum(report.rows.values()) == 200 and min(report.rows.values()) > 20
    parts = {s: load(p).sparse for s, p in report.paths.items()}
    whole = Batch.concat(list(read_criteo(data / "criteo_sample.tsv"))).sparse
    assert sorted(map(bytes, np.concatenate(list(parts.values())))) == sorted(map(bytes, whole))
    np.testing.assert_array_equal(load(again.paths["val"]).sparse, parts["val"])
    assert not np.array_equal(load(other.paths["val"]).sparse[:5], parts["val"][:5])


def test_split_by_file(data, tmp_path):
    report = convert({"train": [data / "criteo_sample.tsv"], "test": [data / "criteo_sample.tsv"]},
                     tmp_path, criteo_schema())
    assert report.rows == {"train": 200, "test": 200}
    np.testing.assert_array_equal(load(report.paths["train"]).dense, load(report.paths["test"]).dense)


def test_frequency_threshold_counts_only_train_rows(data, tmp_path):
    opts = ConvertOptions(split=(0.5, 0.5, 0.0), freq_threshold=3)
    plain = convert([data / "criteo_sample.tsv"], tmp_path / "raw", criteo_schema(),
                    ConvertOptions(split=(0.5, 0.5, 0.0)))
    cut = convert([data / "criteo_sample.tsv"], tmp_path / "cut", criteo_schema(), opts)
    train_raw, val_raw = load(plain.paths["train"]).sparse, load(plain.paths["val"]).sparse
    for c in range(26):
        counts = Counter(train_raw[:, c].tolist())
        for raw, got in ((train_raw, load(cut.paths["train"]).sparse), (val_raw, load(cut.paths["val"]).sparse)):
            want = [v if counts[v] >= 3 else rare_id(c) for v in raw[:, c].tolist()]
            np.testing.assert_array_equal(got[:, c], want)
    assert (load(cut.paths["train"]).sparse == rare_id(2)).sum() > 10


def test_caps_bound_every_column(data, tmp_path):
    caps = tuple([1000] * 13 + [0] * 13)
    raw = convert([data / "criteo_sample.tsv"], tmp_path / "raw", criteo_schema())
    capped = convert([data / "criteo_sample.tsv"], tmp_path / "cap", criteo_schema(), ConvertOptions(caps=caps))
    r, c = load(raw.paths["train"]).sparse, load(capped.paths["train"]).sparse
    np.testing.assert_array_equal(c[:, :13], r[:, :13] % 1000)
    np.testing.assert_array_equal(c[:, 13:], r[:, 13:])
    assert r[:, :13].max() > 1000
    with pytest.raises(ValueError, match="give one cap >= 0 per sparse column"):
        convert([data / "criteo_sample.tsv"], tmp_path / "bad", criteo_schema(), ConvertOptions(caps=(5, 5)))


def test_census_converts_to_two_task_labels(data, tmp_path):
    report = convert([data / "census_income_sample.csv"], tmp_path, census_schema())
    with h5py.File(report.paths["train"][0]) as f:
        assert f["label"].shape == (200, 2)
        assert json.loads(f.attrs["label_names"]) == ["marital_status", "income"]
        assert 0 < f["label"][:, 1].sum() < 200


def test_avazu_converts(data, tmp_path):
    from gpuemb.io.avazu import avazu_schema
    report = convert([data / "avazu_sample.csv"], tmp_path, avazu_schema())
    assert report.rows == {"train": 100} and load(report.paths["train"]).sparse.shape == (100, 22)


def _tool():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parents[2] / "tools" / "convert.py"
    spec = importlib.util.spec_from_file_location("convert_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_converts_with_a_split_by_file_and_reports_errors(data, tmp_path, capsys):
    tool = _tool()
    tsv = str(data / "criteo_sample.tsv")
    assert tool.main(["criteo", tsv, "--test", tsv, "--out", str(tmp_path), "--cap", "100"]) == 0
    assert "train: 200 rows, test: 200 rows (held out by files" in capsys.readouterr().out
    assert load(str(tmp_path / "test")).sparse.max() < 100
    assert tool.main(["criteo", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "x")]) == 1
    assert "missing.tsv: no such file" in capsys.readouterr().err


def test_inputs_with_no_good_row_are_an_error_that_says_why(data, damaged, tmp_path):
    short = "\t".join((data / "criteo_sample.tsv").read_text().split("\n")[0].split("\t")[:30])
    path = damaged("criteo_sample.tsv", {n: short for n in range(1, 201)})
    with pytest.warns(UserWarning), pytest.raises(DataError) as err:
        convert([path], tmp_path / "out", criteo_schema())
    assert str(err.value) == (f"the inputs gave 0 good rows (0 rows read, 200 bad lines skipped (wrong field count: "
                              f"200); first: {path}:1: expected 40 fields, found 30); fix the lines reported, or "
                              "check that the files are in the format given")
    with pytest.warns(UserWarning), pytest.raises(DataError, match=f"the test files \\['{path}'\\] gave 0 good rows"):
        convert({"train": [data / "criteo_sample.tsv"], "test": [path]}, tmp_path / "out2", criteo_schema())


def test_a_report_of_no_rows_says_0():
    assert str(ConvertReport(seconds=0.25)).startswith("0 rows in 0.25 s (0 rows/s); 0 rows read")


def test_the_tool_exits_1_with_one_line_when_no_row_is_good(data, damaged, tmp_path):
    path = damaged("criteo_sample.tsv", {n: "1\t2\t3" for n in range(1, 201)})
    run = subprocess.run([sys.executable, str(TOOL), "criteo", str(path), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.splitlines() == [f"convert.py: the inputs gave 0 good rows (0 rows read, 200 bad lines skipped "
                                       f"(wrong field count: 200); first: {path}:1: expected 40 fields, found 3); fix "
                                       "the lines reported, or check that the files are in the format given"]


def test_the_meta_of_many_inputs_lists_the_first_hundred(data, tmp_path):
    report = convert([data / "criteo_sample.tsv"] * 150, tmp_path, criteo_schema())
    with h5py.File(report.paths["train"][0]) as f:
        sources = json.loads(f.attrs["meta"])["sources"]
    assert sources == [str(data / "criteo_sample.tsv")] * 100 + ["... and 50 more"]
    assert report.rows == {"train": 30_000}


def test_converting_into_a_used_folder_is_refused_and_overwrite_replaces_it_whole(tmp_path, rng):
    small = ConvertOptions(write=WriteOptions(chunk_rows=256, rows_per_shard=512))
    out = tmp_path / "out"
    first = {s: [criteo_file(tmp_path / f"first_{s}.tsv", n, rng)] for s, n in (("train", 3000), ("test", 400))}
    convert(first, out, criteo_schema(), small)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    second = {s: [criteo_file(tmp_path / f"second_{s}.tsv", n, rng)] for s, n in (("train", 1499), ("test", 300))}
    with pytest.raises(DataError) as err:
        convert(second, out, criteo_schema(), small)
    assert str(err.value) == (f"{out}: holds an earlier conversion (9 files, first {out / 'train' / 'manifest.json'}"
                              "), which new shards would mix with; convert into an empty folder, or give "
                              "--overwrite to replace that data set")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing of it touched

    report = convert(second, out, criteo_schema(), small, overwrite=True)
    assert sorted(p.name for p in (out / "train").iterdir()) == ["manifest.json"] + [
        f"part-{i:05d}.h5" for i in range(3)]  # part-00003 to part-00005 of the first are gone
    assert report.rows == {"train": 1499, "test": 300}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnlistedShardWarning)  # each split is listed, so checked
        data = open_data(TrainConfig.from_dict({"data": str(out)}), str(tmp_path), 0)
    try:
        for source, split in ((data.train, "train"), (data.eval, "test")):
            got = Batch.concat([source.read_block(i) for i in range(source.block_sizes.size)])
            want = Batch.concat(list(read_criteo(second[split][0])))
            for x, y in zip(got.arrays(), want.arrays()):
                np.testing.assert_array_equal(x, y)
    finally:
        data.close()


def test_overwrite_removes_the_splits_the_new_conversion_lacks(tmp_path, rng):
    source = criteo_file(tmp_path / "rows.tsv", 400, rng)
    convert([source], tmp_path / "out", criteo_schema(), ConvertOptions(split=(0.5, 0.25, 0.25)))
    convert([source], tmp_path / "out", criteo_schema(), overwrite=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["train"]
    assert load(str(tmp_path / "out" / "train")).rows == 400


def test_a_folder_held_by_another_conversion_is_not_emptied(tmp_path, rng):
    source = criteo_file(tmp_path / "rows.tsv", 100, rng)
    convert([source], tmp_path / "out", criteo_schema())
    for held in (tmp_path / "out", tmp_path / "out" / "train"):
        lock = DirLock(held)  # as a second process writing there would hold it
        try:
            with pytest.raises(DataError, match=f"^{held}: another conversion is writing shards there; wait"):
                convert([source], tmp_path / "out", criteo_schema(), overwrite=True)
        finally:
            lock.release()
        assert load(str(tmp_path / "out" / "train")).rows == 100
