"""Damaged shards: bytes flipped inside a dataset's chunks or anywhere in the file, attributes set to anything,
the file cut short. Reading must give the rows that were written, or raise one of the project's own errors, and
must not hang: libhdf5 can loop forever on some damage (a global heap's), where no Python timeout can reach it, so
a read that takes over a minute ends the process with its stack."""
import faulthandler
import json
import os

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuemb.io.batch import Batch
from gpuemb.io.errors import DataError
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions

pytestmark = pytest.mark.fuzz
FUZZ = settings(max_examples=int(os.environ.get("GPUEMB_FUZZ_EXAMPLES", "25")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
DATASETS = ("label", "dense", "sparse", "checksums")
ATTRIBUTES = ("format", "version", "n_rows", "chunk_rows", "label_names", "dense_names", "sparse_names",
              "sparse_hotness", "meta", "attr_crcs", "extra")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """(the bytes of a small valid shard, its rows, where each dataset's chunks lie in the file)."""
    rng = np.random.default_rng(5)
    rows = Batch(rng.integers(0, 2, 150).astype(np.float32), rng.normal(size=(150, 2)).astype(np.float32),
                 rng.integers(0, 1 << 62, (150, 3)))
    folder = tmp_path_factory.mktemp("shard")
    writer = ShardWriter(str(folder), ShardLayout(("y",), ("a", "b"), ("s", "t", "u")),
                         WriteOptions(chunk_rows=32, rows_per_shard=256))
    writer.append(rows)
    path = writer.close()[0]
    with h5py.File(path, "r") as f:
        chunks = {name: _stored(f[name].id) for name in DATASETS}
    with open(path, "rb") as f:
        return Original(f.read(), rows, chunks)


class Original(tuple):
    """(bytes, rows, chunks), shown short in hypothesis's report of a failing case."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self):
        return f"<a valid shard of {len(self[0])} bytes>"


def _stored(ds):
    """(offset, size) in the file of each chunk of a dataset; one piece for a contiguous one (the checksums)."""
    if ds.get_create_plist().get_layout() != h5py.h5d.CHUNKED:
        return [(ds.get_offset(), ds.get_storage_size())]
    return [(c.byte_offset, c.size) for c in map(ds.get_chunk_info, range(ds.get_num_chunks()))]


def check_reads_right_or_fails_cleanly(path, rows):
    """The rows read from ``path`` equal ``rows``, or reading raised a DataError (ShardError, SchemaError)."""
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        with ShardSource([path]) as src:
            got = Batch.concat([src.read_block(i) for i in range(len(src.blocks))])
    except DataError:
        return
    finally:
        faulthandler.cancel_dump_traceback_later()
    for x, y in zip(got.arrays(), rows.arrays()):
        np.testing.assert_array_equal(x, y)


def write(tmp_path, data):
    path = tmp_path / "part-00000.h5"
    path.write_bytes(bytes(data))
    return path


@FUZZ
@given(st.data())
def test_bytes_changed_inside_a_dataset(tmp_path, original, data):
    raw, rows, chunks = original
    name = data.draw(st.sampled_from(DATASETS))
    offset, size = data.draw(st.sampled_from(chunks[name]))
    changed = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        at = offset + data.draw(st.integers(0, size - 1))
        changed[at] ^= data.draw(st.integers(1, 255))
    check_reads_right_or_fails_cleanly(write(tmp_path, changed), rows)


@FUZZ
@given(st.data())
def test_bytes_changed_anywhere_or_the_file_cut(tmp_path, original, data):
    raw, rows, _ = original
    changed = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 8))):
        changed[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        changed = changed[:data.draw(st.integers(0, len(raw)))]
    check_reads_right_or_fails_cleanly(write(tmp_path, changed), rows)


_JSON_TEXT = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=4),
                          max_leaves=12).map(json.dumps)
# h5py cannot store a NUL in a string attribute, of text or bytes, nor a lone surrogate (not UTF-8)
_TEXT = st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",)), max_size=40)
_BYTES = st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"\1"))
_VALUES = (st.integers(-(1 << 63), (1 << 63) - 1) | st.floats() | _TEXT | _BYTES
           | _JSON_TEXT | st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n)
           | st.lists(st.integers(-5, 5), min_size=1, max_size=4).map(np.array))


@FUZZ
@given(st.data())
def test_attributes_set_to_anything(tmp_path, original, data):
    raw, rows, _ = original
    path = write(tmp_path, raw)
    with h5py.File(path, "r+") as f:
        for _ in range(data.draw(st.integers(1, 3))):
            name = data.draw(st.sampled_from(ATTRIBUTES))
            if data.draw(st.integers(0, 4)) == 0:
                if name in f.attrs:
                    del f.attrs[name]
            else:
                f.attrs[name] = data.draw(_VALUES)
    check_reads_right_or_fails_cleanly(path, rows)
