"""A converted folder knows its shards: a missing, extra, swapped or damaged shard, or a damaged manifest, is one
line naming the file before h5py reads a byte of it; a folder converted before manifests loads with a warning."""
import json
import os
import shutil
import zlib

import h5py
import numpy as np
import pytest

from gpuemb.io import dataset_manifest
from gpuemb.io.batch import Batch
from gpuemb.io.convert import ConvertOptions, convert
from gpuemb.io.criteo import criteo_schema, read_criteo
from gpuemb.io.errors import DataError, ShardError, UnlistedShardWarning
from gpuemb.io.shards import ShardSource, WriteOptions, list_shards

from .test_shard_checks import flip_byte_in_chunk

SMALL = ConvertOptions(write=WriteOptions(chunk_rows=64, rows_per_shard=128))


def criteo_file(path, rows, rng):
    """A Criteo TSV of ``rows`` fresh random lines: a label, 13 counts and 26 hex ids."""
    label, dense = rng.integers(0, 2, rows), rng.integers(0, 1000, (rows, 13))
    sparse = rng.integers(0, 1 << 32, (rows, 26))
    path.write_text("".join("\t".join([str(y), *map(str, d), *(f"{v:08x}" for v in s)]) + "\n"
                            for y, d, s in zip(label, dense, sparse)))
    return path


def converted(tmp_path, rng, name="out", rows=300, options=SMALL):
    """A conversion of ``rows`` fresh rows into ``tmp_path/name``: (its report, the rows read straight from the
    source)."""
    source = criteo_file(tmp_path / f"{name}.tsv", rows, rng)
    return convert([source], tmp_path / name, criteo_schema(), options), Batch.concat(list(read_criteo(source)))


def load(location):
    with ShardSource(location) as src:
        return Batch.concat([src.read_block(i) for i in range(src.block_sizes.size)])


def assert_rows(got, want):
    for x, y in zip(got.arrays(), want.arrays()):
        np.testing.assert_array_equal(x, y)


def one_line_error(location, match):
    with pytest.raises(ShardError) as err:
        ShardSource(location)
    assert "\n" not in str(err.value)
    assert err.match(match)


def test_the_manifest_lists_each_shard_with_its_rows_size_and_crc(tmp_path, rng):
    report, rows = converted(tmp_path, rng)
    folder = tmp_path / "out" / "train"
    body = json.loads((folder / "manifest.json").read_text())
    assert [e["file"] for e in body["shards"]] == ["part-00000.h5", "part-00001.h5", "part-00002.h5"]
    for e in body["shards"]:
        data = (folder / e["file"]).read_bytes()
        assert (e["bytes"], e["crc32"]) == (len(data), zlib.crc32(data))
    assert [e["rows"] for e in body["shards"]] == [128, 128, 44] and body["complete"] and body["split"] == "train"
    fields = {k: v for k, v in body.items() if k != "checksum"}
    assert body["checksum"] == zlib.crc32(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
    assert_rows(load(str(folder)), rows)


def test_a_deleted_shard_is_named(tmp_path, rng):
    converted(tmp_path, rng)
    folder = tmp_path / "out" / "train"
    os.remove(folder / "part-00001.h5")
    one_line_error(str(folder), f"^{folder}/part-00001.h5: is missing \\(1 of the 3 shards listed in "
                                f"{folder}/manifest.json are\\), so the data set is incomplete; restore the files")


def test_a_shard_copied_in_from_another_conversion_is_named(tmp_path, rng):
    converted(tmp_path, rng)
    converted(tmp_path, rng, "other", rows=500)
    folder = tmp_path / "out" / "train"
    shutil.copy(tmp_path / "other" / "train" / "part-00003.h5", folder)
    one_line_error(str(folder), f"^{folder}/part-00003.h5: is not in {folder}/manifest.json \\(1 such files\\), so "
                                "it is not part of this data set .*--overwrite\\)$")
    one_line_error(str(folder / "part-00003.h5"), f"^{folder}/part-00003.h5: is not in {folder}/manifest.json, so")


def test_a_shard_swapped_in_from_a_conversion_of_as_many_rows_is_named(tmp_path, rng):
    converted(tmp_path, rng)
    converted(tmp_path, rng, "two")  # a source name as long as the first's, as the shards' meta lists it
    mine, theirs = tmp_path / "out" / "train" / "part-00001.h5", tmp_path / "two" / "train" / "part-00001.h5"
    assert mine.stat().st_size == theirs.stat().st_size  # same rows, same layout: only the bytes tell them apart
    shutil.copy(theirs, mine)
    for location in (str(mine.parent), str(mine), [mine]):
        one_line_error(location, f"^{mine}: CRC32 0x[0-9a-f]{{8}}, but {mine.parent}/manifest.json recorded "
                                 "0x[0-9a-f]{8}; the file is truncated or corrupt, or another conversion's")


def test_a_flipped_byte_is_caught_by_the_manifest_before_h5py_opens_the_shard(tmp_path, rng, monkeypatch):
    report, _ = converted(tmp_path, rng)
    shard = report.paths["train"][0]
    flip_byte_in_chunk(shard, "sparse", 1)

    def no_parse(*args, **kwargs):
        raise AssertionError("h5py was handed a shard whose bytes were not checked")

    monkeypatch.setattr(h5py, "File", no_parse)
    one_line_error(str(tmp_path / "out" / "train"), f"^{shard}: CRC32 0x[0-9a-f]{{8}}, but")


def test_a_truncated_shard_is_named_by_its_size(tmp_path, rng):
    report, _ = converted(tmp_path, rng)
    shard = report.paths["train"][0]
    size = os.path.getsize(shard)
    os.truncate(shard, size - 10)
    one_line_error([shard], f"^{shard}: {size - 10} bytes, but .*manifest.json recorded {size} bytes")


def test_a_folder_converted_before_manifests_loads_with_a_warning(tmp_path, rng):
    _, rows = converted(tmp_path, rng)
    folder = tmp_path / "out" / "train"
    os.remove(folder / "manifest.json")
    with pytest.warns(UnlistedShardWarning, match=f"1 shard folders, first {folder}, have no manifest.json "
                                                  "\\(converted before manifests\\), so a missing, extra or swapped "
                                                  "shard there goes unnoticed; convert the source again"):
        got = load(str(folder))
    assert_rows(got, rows)


def test_a_conversion_that_failed_leaves_its_folders_marked_unfinished(tmp_path, rng):
    good, bad = criteo_file(tmp_path / "good.tsv", 100, rng), tmp_path / "bad.tsv"
    bad.write_text("1\t2\t3\n")
    with pytest.warns(UserWarning), pytest.raises(DataError, match="the test files .* gave 0 good rows"):
        convert({"train": [good], "test": [bad]}, tmp_path / "out", criteo_schema())
    with pytest.raises(ShardError, match="manifest.json: the conversion writing this folder has not finished"):
        list_shards(tmp_path / "out", "train")


def manifest_text(body):
    """``body`` with a checksum that fits it, as JSON: a damaged manifest that only the form checks can catch."""
    fields = {k: v for k, v in body.items() if k != "checksum"}
    return json.dumps({**fields, "checksum": zlib.crc32(json.dumps(fields, sort_keys=True,
                                                                   separators=(",", ":")).encode())})


def entry(body, **values):
    return {**body, "shards": [{**body["shards"][0], **values}, *body["shards"][1:]]}


DAMAGED = {
    "not json": (lambda text, body: text[:-2], "is not JSON \\(JSONDecodeError"),
    "not utf-8": (lambda text, body: "\udcff" + text, "is not JSON \\(UnicodeDecodeError"),
    "a digit changed": (lambda text, body: text.replace('"rows": 128', '"rows": 129', 1),
                        "its fields have checksum 0x[0-9a-f]{8}, but it recorded 0x[0-9a-f]{8}"),
    "rows as text": (lambda text, body: manifest_text(entry(body, rows="128")),
                     "shard 0's field 'rows' is '128', not a count"),
    "negative bytes": (lambda text, body: manifest_text(entry(body, bytes=-1)), "field 'bytes' is -1, not a count"),
    "a path for a name": (lambda text, body: manifest_text(entry(body, file="../../part-00000.h5")),
                          "field 'file' is '../../part-00000.h5', not a shard name"),
    "a huge crc": (lambda text, body: manifest_text(entry(body, crc32=1 << 40)), "field 'crc32' is 1099511627776"),
    "a huge number": (lambda text, body: text.replace('"rows": 128', '"rows": ' + "9" * 5000, 1), "is not JSON"),
    "a float": (lambda text, body: text.replace('"rows": 128', '"rows": 1e999', 1), "field 'rows' is inf"),
    "deep nesting": (lambda text, body: text.replace('"rows": 128', '"rows": ' + "[" * 100_000, 1),
                     "is not JSON \\(RecursionError"),
    "nested shards": (lambda text, body: manifest_text({**body, "shards": [[[[]]]]}),
                      "shard 0 is \\[\\[\\[\\]\\]\\], not an object"),
    "a list": (lambda text, body: "[1, 2]", "the manifest is \\[1, 2\\], not an object of the fields format"),
    "a field missing": (lambda text, body: manifest_text({k: v for k, v in body.items() if k != "split"}),
                        "not an object of the fields format"),
    "a newer version": (lambda text, body: manifest_text({**body, "version": 2}),
                        "the manifest's field 'version' is 2, not 1"),
    "a shard twice": (lambda text, body: manifest_text({**body, "shards": body["shards"] + body["shards"][:1]}),
                      "lists a shard twice"),
    "a boolean split": (lambda text, body: manifest_text({**body, "complete": 1}), "field 'complete' is 1"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_manifest_is_one_line(tmp_path, rng, case):
    converted(tmp_path, rng)
    path = tmp_path / "out" / "train" / "manifest.json"
    damage, message = DAMAGED[case]
    text = path.read_text()
    path.write_bytes(damage(text, json.loads(text)).encode("utf-8", "surrogateescape"))
    for location in (str(path.parent), [path.parent / "part-00000.h5"]):
        one_line_error(location, f"^{path}: .*{message}")


def test_a_manifest_too_large_is_refused_before_it_is_parsed(tmp_path, rng, monkeypatch):
    converted(tmp_path, rng)
    monkeypatch.setattr(dataset_manifest, "MAX_BYTES", 100)
    one_line_error(str(tmp_path / "out" / "train"), "manifest.json: more than 100 bytes, far more than a manifest")


def test_each_split_of_a_conversion_names_one_data_set(tmp_path, rng):
    converted(tmp_path, rng, options=ConvertOptions(split=(0.7, 0.3, 0.0)))
    converted(tmp_path, rng, "other", options=ConvertOptions(split=(0.7, 0.3, 0.0)))
    out, other = tmp_path / "out", tmp_path / "other"
    dataset_manifest.one_conversion(out / "train", out / "val")
    assert dataset_manifest.read(out / "train").dataset == dataset_manifest.read(out / "val").dataset
    shutil.rmtree(out / "val")
    shutil.copytree(other / "val", out / "val")
    with pytest.raises(ShardError, match=f"^{out}/val: is from another conversion than {out}/train"):
        dataset_manifest.one_conversion(out / "train", out / "val")
