"""A snapshot's attributes: each checked for its type and range, their checksum (version 2) checked on opening,
and a version 1 file, which has none, still read."""
import json

import h5py
import numpy as np
import pytest

from gpuemb.store.snapshot import SnapshotError, TableSnapshot, read_snapshot, write_snapshot
from gpuemb.store.snapshot.format import ATTRS_CRC

from .snapshot_files import as_version, resealed

LAYOUT = {"weights": [0, 4], "sum_sq": [4, 5]}


@pytest.fixture
def written(tmp_path, rng):
    n = 100
    keys = rng.permutation(10 * n)[:n].astype(np.int64)
    rows = rng.standard_normal((n, 5)).astype(np.float32)
    steps = rng.integers(1, 100, n).astype(np.int32)
    path = tmp_path / "snap.h5"
    write_snapshot(path, {"emb": TableSnapshot({"dim": 4, "lr": 0.1}, LAYOUT, keys, rows, steps)}, chunk_rows=32,
                   meta={"step": 7})
    return path, keys, rows, steps


def test_a_version_1_file_without_the_checksum_still_reads(written):
    path, keys, rows, steps = written
    path = as_version(path, path.with_name("v1.h5"), 1)
    got = read_snapshot(path).tables["emb"].load_all()
    assert np.array_equal(got.keys, keys) and np.array_equal(got.rows, rows) and np.array_equal(got.steps, steps)


@pytest.mark.parametrize("where, name, value", [
    ("", "meta", json.dumps({"step": 8})), ("tables/emb", "config", json.dumps({"dim": 4, "lr": 0.2})),
    ("tables/emb", "part_dtypes", "{}"), ("", "base", "x")])
def test_an_attribute_changed_to_another_valid_value_fails_the_checksum(written, where, name, value):
    with resealed(written[0]) as f:
        f[where or "/"].attrs[name] = value
    with pytest.raises(SnapshotError, match="snap.h5: the checksum of its attributes does not match"):
        read_snapshot(written[0])


@pytest.mark.parametrize("version", [2, 3])
def test_a_file_without_its_attribute_checksum_is_refused(written, version):
    path = as_version(written[0], written[0].with_name("v2.h5"), 2) if version == 2 else written[0]
    with resealed(path) if version == 3 else h5py.File(path, "a") as f:
        del f.attrs[ATTRS_CRC]
    with pytest.raises(SnapshotError, match=f"attribute '{ATTRS_CRC}' is missing"):
        read_snapshot(path)


@pytest.mark.parametrize("where, name, value, message", [
    ("tables/emb", "chunk_rows", 0, "'chunk_rows' is 0, not positive"),
    ("tables/emb", "chunk_rows", -3, "'chunk_rows' is -3, not a non-negative int"),
    ("tables/emb", "n_rows", "100", "'n_rows' is '100', not a non-negative int"),
    ("tables/emb", "has_steps", 1, "'has_steps' is 1, not a bool"),
    ("tables/emb", "layout", json.dumps([1, 2]), "'layout' is a JSON list, not a dict"),
    ("tables/emb", "layout", json.dumps({"weights": "ab"}), "attribute 'layout' is wrong"),
    ("tables/emb", "config", "[" * 50000 + "]" * 50000, "'config' is JSON nested too deeply"),
    ("tables/emb", "config", '{"a": ' + "[" * 34 + "0" + "]" * 34 + "}",
     "'config' is JSON nested more than 32 deep"),
    ("", "meta", np.arange(3), "'meta' is array"),
    ("", "version", 2.0, "'version' is .*2.0.*, not a non-negative int"),
    ("", "id", 5, "'id' is 5, not a str")])
def test_an_attribute_of_the_wrong_type_or_range_is_a_snapshot_error(written, where, name, value, message):
    with resealed(written[0]) as f:
        f[where or "/"].attrs[name] = value
    with pytest.raises(SnapshotError, match=f"snap.h5.*{message}".replace("[", "\\[").replace("(", "\\(")):
        read_snapshot(written[0])
