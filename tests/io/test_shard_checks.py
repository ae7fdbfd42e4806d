"""Checksummed shards: a flipped byte in a chunk, the checksum table or an attribute is found and named; hostile
attributes are a ShardError naming the file and the attribute; version 1 shards are read with a warning."""
import json
import zlib

import h5py
import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.errors import ShardError, UncheckedShardWarning
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions, open_shard

CHUNK = 64
ATTRIBUTE_TEXTS = ("format", "label_names", "dense_names", "sparse_names", "sparse_hotness", "meta", "attr_crcs")


@pytest.fixture
def rows():
    """300 random rows: a label, 3 dense and 4 sparse columns."""
    rng = np.random.default_rng(11)
    return Batch(rng.integers(0, 2, 300).astype(np.float32), rng.normal(size=(300, 3)).astype(np.float32),
                 rng.integers(0, 1 << 62, (300, 4)))


@pytest.fixture
def shard(tmp_path, rows):
    layout = ShardLayout(("y",), ("a", "b", "c"), ("s0", "s1", "s2", "s3"), meta={"source": "test"})
    writer = ShardWriter(str(tmp_path / "train"), layout, WriteOptions(chunk_rows=CHUNK, rows_per_shard=1024))
    writer.append(rows)
    return writer.close()[0]


def read_all(path):
    with ShardSource([path]) as src:
        return Batch.concat([src.read_block(i) for i in range(len(src.blocks))])


def flip_byte_in_chunk(path, name, chunk, at=5):
    """Flip one byte of the stored bytes of ``chunk`` of dataset ``name``."""
    with h5py.File(path, "r") as f:
        offset = f[name].id.get_chunk_info(chunk).byte_offset + at
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x80]))


def test_each_chunk_carries_the_crc32_of_its_rows(shard, rows):
    with h5py.File(shard, "r") as f:
        table = f["checksums"][()]
        assert f.attrs["version"] == 2 and table.dtype == np.uint32 and table.shape == (5, 3)
    for i in range(5):
        a, b = i * CHUNK, min((i + 1) * CHUNK, 300)
        assert list(table[i]) == [zlib.crc32(np.ascontiguousarray(x[a:b])) for x in rows.arrays()]
    got = read_all(shard)
    for x, y in zip(got.arrays(), rows.arrays()):
        np.testing.assert_array_equal(x, y)


def test_text_attributes_are_stored_in_the_attribute_not_the_global_heap(shard):
    # libhdf5 looped forever reading a variable-length string whose global heap had a flipped byte
    with h5py.File(shard, "r") as f:
        texts = [name for name in f.attrs if f.attrs.get_id(name).get_type().get_class() == h5py.h5t.STRING]
        assert sorted(texts) == sorted(ATTRIBUTE_TEXTS)
        assert not any(f.attrs.get_id(name).get_type().is_variable_str() for name in texts)
        assert json.loads(f.attrs["meta"]) == {"source": "test"}


@pytest.mark.parametrize("name, col", [("label", 0), ("dense", 1), ("sparse", 2)])
def test_a_flipped_byte_in_a_chunk_is_named_when_the_chunk_is_read(shard, rows, name, col):
    flip_byte_in_chunk(shard, name, 2)
    with ShardSource([shard]) as src:  # the attributes are fine, so opening is
        for i in (0, 1, 3, 4):
            np.testing.assert_array_equal(src.read_block(i).arrays()[col], rows.arrays()[col][i * CHUNK:][:CHUNK])
        with pytest.raises(ShardError, match=f"^{shard}: dataset '{name}', chunk 2 \\(rows 128:192\\) has checksum "
                                             "0x[0-9a-f]{8}, but the shard recorded 0x[0-9a-f]{8}; the file is "
                                             "corrupt, so convert the source again$"):
            src.read_block(2)


def test_the_loader_stops_at_a_damaged_chunk_instead_of_yielding_its_rows(shard):
    flip_byte_in_chunk(shard, "sparse", 4, at=0)
    with ShardSource([shard]) as src:
        loader = Loader(src, LoaderConfig(batch_size=50, seed=0))
        with pytest.raises(ShardError, match="dataset 'sparse', chunk 4 \\(rows 256:300\\)"):
            list(loader)


def test_a_flipped_byte_in_the_checksum_table_is_found_on_opening(shard):
    with h5py.File(shard, "r+") as f:
        table = f["checksums"][()]
        table[1, 2] ^= 1 << 7
        f["checksums"][...] = table
    with pytest.raises(ShardError, match=f"^{shard}: dataset 'checksums' has checksum .* the checksum table is "
                                         "corrupt, so convert the source again$"):
        open_shard(shard)


ALTERED = {"n_rows": 299, "chunk_rows": 65, "version": 1, "format": "gpuemb-shard ", "label_names": '["z"]',
           "dense_names": '["a", "b", "d"]', "sparse_names": '["s0", "s1", "s2", "t3"]',
           "sparse_hotness": "[1, 1, 1, 1]\n", "meta": '{"source": "tset"}'}


@pytest.mark.parametrize("name", sorted(ALTERED))
def test_an_altered_attribute_is_named(shard, name):
    with h5py.File(shard, "r+") as f:
        if name == "chunk_rows":
            del f["checksums"]  # a matching table, so that the attribute's own checksum is what fails
            f["checksums"] = np.zeros((-(-300 // 65), 3), np.uint32)
        f.attrs[name] = ALTERED[name]
    with pytest.raises(ShardError, match=f"^{shard}: attribute '{name}'"):
        open_shard(shard)


HOSTILE = {"chunk_rows": [0, -3, "64", 2.5, np.array([64, 64])], "n_rows": [-1, "300", True],
           "version": [0, 3, "2"], "format": [b"\xff\xfe", 7],
           "label_names": ["[" * 100_000 + "]" * 100_000, "not json", "{}", '["y", 3]', "[]", np.int64(5)],
           "dense_names": ['"a"', "null"], "sparse_names": ["[1e400]"],
           "sparse_hotness": ["[0, 1, 1, 1]", "[1, 1]", "[true, 1, 1, 1]", "[1.5, 1, 1, 1]"],
           "meta": ["[]", "{" * 50_000, b"\x80"], "attr_crcs": ["{}", '{"format": "x"}', "[" * 100_000]}


@pytest.mark.parametrize("version, name, value", [(n, k, v) for k, vs in HOSTILE.items() for v in vs
                                                   for n in (1, 2) if n == 2 or k != "attr_crcs"],
                         ids=lambda v: repr(v)[:20])
def test_a_hostile_attribute_is_a_shard_error_naming_it(shard, version, name, value):
    with h5py.File(shard, "r+") as f:
        if version == 1:
            del f["checksums"], f.attrs["attr_crcs"]
            f.attrs["version"] = 1
        f.attrs[name] = value
    mismatch = (name, str(value)) in {("label_names", "[]"), ("sparse_hotness", "[1, 1]")}
    where = "attributes 'label_names' or 'sparse_hotness'" if mismatch else f"attribute '{name}'"
    with pytest.raises(ShardError, match=f"^{shard}: {where}"):
        open_shard(shard)


def test_a_missing_attribute_or_checksum_table_is_named(shard):
    with h5py.File(shard, "r+") as f:
        del f.attrs["attr_crcs"]
    with pytest.raises(ShardError, match="attribute 'attr_crcs' is missing"):
        open_shard(shard)
    with h5py.File(shard, "r+") as f:
        del f["checksums"]
    with pytest.raises(ShardError, match="dataset 'checksums' is missing from a version 2 shard"):
        open_shard(shard)


def test_a_version_1_shard_is_read_with_a_warning(shard, rows):
    with h5py.File(shard, "r+") as f:
        del f["checksums"], f.attrs["attr_crcs"]
        f.attrs["version"] = 1
    with pytest.warns(UncheckedShardWarning, match="1 of 1 shards, first .*part-00000.h5, are version 1 and carry "
                                                   "no checksums.*convert the source again"):
        got = read_all(shard)
    for x, y in zip(got.arrays(), rows.arrays()):
        np.testing.assert_array_equal(x, y)
    assert json.loads(h5py.File(shard, "r").attrs["meta"]) == {"source": "test"}


def test_a_meta_too_long_for_an_attribute_is_refused_before_writing(tmp_path):
    layout = ShardLayout(("y",), (), ("s",), meta={"note": "x" * 70_000})
    with pytest.raises(ValueError, match="shard attribute 'meta': 70012 bytes of text, more than the 60000"):
        ShardWriter(str(tmp_path), layout)
    assert not list(tmp_path.iterdir())
