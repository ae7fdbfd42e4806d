"""Parquet to shards and into training: rows through convert and ShardSource against the reference, the threshold
and the caps on jagged features, tools/convert.py parquet, and tools/train.py --format parquet."""
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the Parquet reader needs pyarrow (pip install -e '.[parquet]')")

from gpuemb.io.bags import Bags  # noqa: E402
from gpuemb.io.batch import Batch  # noqa: E402
from gpuemb.io.convert import ConvertOptions, convert  # noqa: E402
from gpuemb.io.errors import BadLineWarning  # noqa: E402
from gpuemb.io.hashing import rare_id  # noqa: E402
from gpuemb.io.shards import ShardSource, WriteOptions  # noqa: E402

from .test_parquet import assert_matches, random_columns, reference, schema_of, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JAGGED = (1, 3)  # the features of CATEGORICAL that are lists: tags and words


def load(paths):
    with ShardSource(paths) as src:
        assert src.layout.hotness == (1, 0, 1, 0) and src.layout.jagged_names == ("tags", "words")
        return Batch.concat([src.read_block(i) for i in range(src.block_sizes.size)])


def quiet_convert(*args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadLineWarning)
        return convert(*args)


def test_shards_of_a_parquet_file_hold_its_rows(tmp_path, rng):
    columns = random_columns(rng, 3000)
    path = write(tmp_path / "x.parquet", columns, row_group_size=500)
    report = quiet_convert([path], tmp_path / "shards", schema_of(path),
                           ConvertOptions(write=WriteOptions(chunk_rows=256, rows_per_shard=1024)))
    assert len(report.paths["train"]) == 3 and report.parse.bad == sum(y is None for y in columns["y"])
    assert_matches(load(report.paths["train"]), reference(columns))


def _rows(batch):
    """Each row as a tuple of its label, ids and bags, to compare rows whatever split they went to."""
    ends = batch.bags.row_ends()
    return sorted((float(batch.label[r]), *batch.sparse[r].tolist(), *batch.bags.lengths[r].tolist(),
                   *batch.bags.values[ends[r]:ends[r + 1]].tolist()) for r in range(batch.rows))


def test_a_ratio_split_keeps_each_row_whole(tmp_path, rng):
    columns = random_columns(rng, 1000)
    path = write(tmp_path / "x.parquet", columns, row_group_size=300)
    report = quiet_convert([path], tmp_path / "shards", schema_of(path), ConvertOptions(split=(0.6, 0.4, 0.0)))
    train, val = load(report.paths["train"]), load(report.paths["val"])
    assert train.rows > 400 and val.rows > 250
    label, dense, sparse, lengths, values = reference(columns)
    assert _rows(Batch.concat([train, val])) == _rows(Batch(label, dense, sparse, Bags(lengths, values)))


def test_threshold_and_caps_apply_to_each_jagged_feature(tmp_path, rng):
    columns = random_columns(rng, 2000)
    path = write(tmp_path / "x.parquet", columns, row_group_size=700)
    caps = (0, 7, 1000, 0)
    report = quiet_convert([path], tmp_path / "shards", schema_of(path),
                           ConvertOptions(freq_threshold=40, caps=caps))
    label, dense, sparse, lengths, values = reference(columns)
    # the reference: per feature, ids seen fewer than 40 times become the feature's rare id, then the cap
    owner = np.repeat(np.tile(JAGGED, lengths.shape[0]), lengths.ravel())
    features = {0: sparse[:, 0], 1: values[owner == 1], 2: sparse[:, 1], 3: values[owner == 3]}
    rare = {}
    for f, ids in features.items():
        counts = Counter(ids.tolist())
        ids = np.array([i if counts[i] >= 40 else rare_id(f) for i in ids.tolist()], np.int64)
        rare[f] = (ids == rare_id(f)).mean()
        features[f] = ids % caps[f] if caps[f] else ids
    assert rare[3] == 0 and 0 < rare[1] < 1  # words' 5 tokens are frequent, some tags are not
    values = values.copy()
    values[owner == 1], values[owner == 3] = features[1], features[3]
    assert_matches(load(report.paths["train"]), (label, dense, np.stack([features[0], features[2]], 1), lengths,
                                                 values))


def run(tool, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "GPUEMB_DEVICE": "cpu"})


def test_tools_convert_parquet_writes_shards_and_reports_bad_rows(tmp_path, rng):
    columns = random_columns(rng, 400)
    path = write(tmp_path / "x.parquet", columns, row_group_size=100)
    names = ["--label", "y", "--dense", "d_f", "d_i", "--categorical", "c_str", "tags", "c_int", "words"]
    out = run("convert.py", "parquet", path, *names, "--max-bag", "3", "--split", "1", "0", "0",
              "--out", tmp_path / "shards")
    assert out.returncode == 0, out.stderr
    long = sum(y is not None and max(len(t or ()) - (t or []).count(None), len(w or ()) - (w or []).count(None)) > 3
               for y, t, w in zip(columns["y"], columns["tags"], columns["words"]))
    assert f"train: {400 - long - columns['y'].count(None)} rows" in out.stdout, out.stdout
    assert re.search(r"skipped .*x\.parquet: row group \d, row \d+ \(file row \d+\): column '(tags|words)': "
                     r"a bag of \d keys, more than max_bag=3", out.stdout), out.stdout
    batch = load(sorted((tmp_path / "shards" / "train").glob("part-*.h5")))
    assert batch.bags.lengths.max() == 3


def test_tools_convert_parquet_names_a_missing_column_in_one_line(tmp_path, rng):
    path = write(tmp_path / "x.parquet", random_columns(rng, 10))
    out = run("convert.py", "parquet", path, "--label", "y", "--categorical", "tag", "--out", tmp_path / "shards")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert f"convert.py: {path}: categorical column 'tag' is not in the file; its columns: y (double)" in out.stderr


def test_tools_train_trains_on_a_parquet_file_with_list_columns(tmp_path, rng):
    columns = random_columns(rng, 3000)
    path = write(tmp_path / "x.parquet", columns, row_group_size=1000)
    out = run("train.py", "--data", path, "--format", "parquet", "--label", "y", "--dense", "d_f", "d_i",
              "--categorical", "c_str", "tags", "c_int", "words", "--eval-fraction", "0.2", "--steps", "3",
              "--batch-size", "256", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert re.search(r"parquet files .* \([\d,]+ train, [\d,]+ eval rows", out.stdout), out.stdout
    found = re.search(r"^done: .* eval AUC ([\d.]+).*log-loss ([\d.]+)", out.stdout.strip().splitlines()[-1])
    assert found and 0 < float(found.group(1)) < 1, out.stdout
