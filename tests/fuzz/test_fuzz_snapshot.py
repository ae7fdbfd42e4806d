"""Fuzzing a snapshot (``embeddings.h5``): bytes flipped and attributes replaced in a valid file. Reading it either
gives back the rows written or raises a SnapshotError; any other exception, or other rows, is a failure.

Snapshots are sealed (version 3, ``snapshot/seal.py``): any changed byte is a SnapshotError before h5py opens the
file, which libhdf5 could crash or hang on (older, unsealed versions are not fuzzed here: they can). Attributes are
replaced and the file sealed again, so that the checks behind the seal are fuzzed too. A read that takes over a
minute ends the process with its stack."""
import faulthandler
import os
import shutil

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuemb.store.snapshot import VERSION, SnapshotError, TableSnapshot, read_snapshot, reader, write_snapshot
from gpuemb.store.snapshot.seal import seal

pytestmark = pytest.mark.fuzz
SETTINGS = settings(max_examples=int(os.environ.get("GPUEMB_FUZZ_EXAMPLES", "25")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
FILE_ATTRS = ("format", "version", "id", "kind", "base", "created", "meta", "attrs_crc32")
TABLE_ATTRS = ("config", "layout", "part_dtypes", "n_rows", "chunk_rows", "has_steps", "extras", "clock")
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
    ticks = np.stack([keys, rng.integers(0, 9, n)], 1)
    table = TableSnapshot({"dim": 4}, {"weights": [0, 4], "v": [4, 5]}, keys, rows, steps, extras={"ticks": ticks},
                          clock=9)
    write_snapshot(path, {"emb": table}, chunk_rows=32, meta={"step": 3})
    return path, keys, rows, steps


def read_back(path, want):
    """The rows (and ticks) read from ``path`` equal ``want``, or a SnapshotError was raised."""
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        t = read_snapshot(path).tables["emb"]
        got, ticks = t.load_all(), t.extra("ticks")
    except SnapshotError:
        return
    finally:
        faulthandler.cancel_dump_traceback_later()
    keys, rows, steps = want
    assert np.array_equal(got.keys, keys) and np.array_equal(got.rows, rows) and np.array_equal(got.steps, steps)
    assert np.array_equal(ticks[:, 0], keys)


def never(*args, **kwargs):
    raise AssertionError("h5py opened a damaged snapshot")


@SETTINGS
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4))
def test_flipped_bytes_raise_a_snapshot_error_before_h5py_opens_the_file(original, tmp_path, flips):
    path = tmp_path / "embeddings.h5"
    shutil.copy(original[0], path)
    data = bytearray(path.read_bytes())
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    path.write_bytes(data)
    if data == original[0].read_bytes():  # flips that undid each other
        read_back(path, original[1:])
    else:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(reader.h5py, "File", never)
            with pytest.raises(SnapshotError):
                read_snapshot(path)


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
    seal(path, VERSION)
    read_back(path, original[1:])
