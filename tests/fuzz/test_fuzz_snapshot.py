"""Fuzzing a snapshot (``embeddings.h5``): bytes flipped and attributes replaced in a valid file. Reading it either
gives back the rows written or raises a SnapshotError; any other exception, or other rows, is a failure."""
import os
import shutil

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuemb.store.snapshot import SnapshotError, TableSnapshot, read_snapshot, write_snapshot

pytestmark = pytest.mark.fuzz
SETTINGS = settings(max_examples=int(os.environ.get("GPUEMB_FUZZ_EXAMPLES", "25")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
FILE_ATTRS = ("format", "version", "id", "kind", "base", "created", "meta", "attrs_crc32")
TABLE_ATTRS = ("config", "layout", "part_dtypes", "n_rows", "chunk_rows", "has_steps")
TEXT = st.text(st.characters(exclude_characters="\x00"), max_size=30)  # h5py stores no NUL in a string
VALUES = st.one_of(st.integers(-2, 2**40), st.booleans(), TEXT, st.floats(allow_nan=True),
                   st.sampled_from(['{"weights": [0, 4]}', "[]", "{}", "[" * 3000, "null", '{"dim": 4}']),
                   st.lists(st.integers(0, 9), min_size=1, max_size=4).map(np.array))


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    rng = np.random.default_rng(15)
    n = 90
    keys, steps = rng.permutation(10 * n)[:n].astype(np.int64), rng.integers(1, 99, n).astype(np.int32)
    rows = rng.standard_normal((n, 5)).astype(np.float32)
    path = tmp_path_factory.mktemp("fuzz") / "embeddings.h5"
    write_snapshot(path, {"emb": TableSnapshot({"dim": 4}, {"weights": [0, 4], "v": [4, 5]}, keys, rows, steps)},
                   chunk_rows=32, meta={"step": 3})
    return path, keys, rows, steps


def read_back(path, want):
    """The rows read from ``path`` equal ``want``, or a SnapshotError was raised."""
    try:
        got = read_snapshot(path).tables["emb"].load_all()
    except SnapshotError:
        return
    keys, rows, steps = want
    assert np.array_equal(got.keys, keys) and np.array_equal(got.rows, rows) and np.array_equal(got.steps, steps)


@SETTINGS
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4))
def test_flipped_bytes_read_right_or_raise_a_snapshot_error(original, tmp_path, flips):
    path = tmp_path / "embeddings.h5"
    shutil.copy(original[0], path)
    data = bytearray(path.read_bytes())
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    path.write_bytes(data)
    read_back(path, original[1:])


@SETTINGS
@given(changes=st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.one_of(st.none(), VALUES)), min_size=1,
                        max_size=3))
def test_replaced_or_removed_attributes_read_right_or_raise_a_snapshot_error(original, tmp_path, changes):
    path = tmp_path / "embeddings.h5"
    shutil.copy(original[0], path)
    with h5py.File(path, "a") as f:
        for in_table, i, value in changes:
            obj, names = (f["tables/emb"], TABLE_ATTRS) if in_table else (f, FILE_ATTRS)
            name = names[i % len(names)]
            if value is None:
                obj.attrs.pop(name, None)
            else:
                obj.attrs[name] = value
    read_back(path, original[1:])
