"""The seal of a version 3 snapshot (``snapshot/seal.py``): every byte after it is checked with plain reads before
h5py parses the file, text attributes are held in the attribute rather than the global heap, and files of versions
1 and 2, which have no seal, read as before."""
import h5py
import numpy as np
import pytest

from gpuemb.store.snapshot import VERSION, SnapshotError, TableSnapshot, read_snapshot, reader, seal, write_snapshot

from .snapshot_files import as_version, flip, resealed, with_extras

TEXTS = {"/": ["base", "created", "format", "id", "kind", "meta"], "/tables/emb": ["config", "extras", "layout",
                                                                                    "part_dtypes"]}


@pytest.fixture
def written(tmp_path, rng):
    path, table = tmp_path / "snap.h5", with_extras(rng)
    write_snapshot(path, {"emb": table}, chunk_rows=32, meta={"step": 7})
    return path, table


def assert_reads_as(path, table):
    t = read_snapshot(path).tables["emb"]
    got = t.load_all()
    for x, y in [(got.keys, table.keys), (got.rows, table.rows), (got.steps, table.steps)] + \
            [(t.extra(name), values) for name, values in table.extras.items()]:
        np.testing.assert_array_equal(x, y)


def test_text_attributes_are_fixed_length_strings(written):
    # libhdf5 crashed or looped forever reading a variable-length string whose global heap had a flipped byte
    with h5py.File(written[0], "r") as f:
        for where, names in TEXTS.items():
            types = {k: f[where].attrs.get_id(k).get_type() for k in f[where].attrs}
            assert sorted(k for k, t in types.items() if t.get_class() == h5py.h5t.STRING) == names
            assert not any(types[k].is_variable_str() for k in names)
        assert f.attrs["meta"] == b'{"step": 7}' and f.userblock_size == seal.USERBLOCK


def test_a_flipped_byte_anywhere_is_caught_before_h5py_opens_the_file(written, monkeypatch, rng):
    path, _ = written
    data = path.read_bytes()

    def never(*args, **kwargs):
        raise AssertionError("h5py opened a damaged snapshot")
    monkeypatch.setattr(reader.h5py, "File", never)
    # Every byte of the seal, the superblock and the first object headers, and of the end, where HDF5 puts what
    # it writes last (attributes, object headers), and 500 bytes in between: the chunks and the heaps.
    ends = np.r_[np.arange(1536), np.arange(len(data) - 512, len(data)), rng.integers(1536, len(data) - 512, 500)]
    for offset in ends.tolist():
        damaged = bytearray(data)
        damaged[offset] ^= int(rng.integers(1, 256))
        path.write_bytes(damaged)
        with pytest.raises(SnapshotError, match="snap.h5: .*(seal|the file is corrupt)"):
            read_snapshot(path)


def test_the_seal_is_read_a_block_at_a_time(written, monkeypatch):
    path, table = written
    monkeypatch.setattr(seal, "BLOCK", 1000)  # a file of many blocks: the CRC runs on across them
    write_snapshot(path, {"emb": table}, chunk_rows=32)
    monkeypatch.undo()
    assert_reads_as(path, table)
    flip(path, path.stat().st_size - 1)
    with pytest.raises(SnapshotError, match="the CRC32 of its .* bytes after the seal is"):
        read_snapshot(path)


@pytest.mark.parametrize("version", [1, 2])
def test_files_of_older_versions_read_as_they_did(written, version):
    path, table = written
    assert path.read_bytes().startswith(seal.MAGIC + VERSION.to_bytes(4, "little"))
    old = as_version(path, path.with_name("old.h5"), version)
    assert_reads_as(old, table)
    assert read_snapshot(old).meta == {"step": 7}


def test_a_seal_that_does_not_fit_the_version_is_refused(written):
    path, _ = written
    old = as_version(path, path.with_name("old.h5"), 2)
    with resealed(path) as f:
        f.attrs["version"] = 2
    with pytest.raises(SnapshotError, match="snap.h5: is version 2, but its seal is of version 3"):
        read_snapshot(path)
    with h5py.File(old, "a") as f:
        f.attrs["version"] = 3
    with pytest.raises(SnapshotError, match="old.h5: is version 3, but its seal is missing"):
        read_snapshot(old)


def test_a_file_replaced_after_its_seal_was_checked_is_refused(written):
    path, table = written
    t = read_snapshot(path).tables["emb"]
    write_snapshot(path, {"emb": table}, chunk_rows=32)  # the same rows, another snapshot
    with pytest.raises(SnapshotError, match="snap.h5: changed since its seal was checked"):
        t.load_all()


def test_a_meta_too_long_for_an_object_header_is_kept(tmp_path, rng):
    meta = {"notes": rng.bytes(60_000).hex()}  # 120 kB, over the 64 kB of a message in an object header
    table = TableSnapshot({"dim": 4}, {"weights": [0, 4]}, np.arange(3), rng.standard_normal((3, 4)))
    write_snapshot(tmp_path / "snap.h5", {"emb": table}, meta=meta)
    assert read_snapshot(tmp_path / "snap.h5").meta == meta


def test_any_h5py_failure_is_one_snapshot_error_line(written, monkeypatch):
    path, _ = written
    t = read_snapshot(path).tables["emb"]

    def fails(*args):
        raise SystemError("libhdf5 gave up")
    monkeypatch.setattr(h5py.Dataset, "__getitem__", fails)
    with pytest.raises(SnapshotError, match=r"snap.h5: table 'emb'.*cannot be read \(libhdf5 gave up\)") as e:
        t.load_all()
    assert "\n" not in str(e.value)
