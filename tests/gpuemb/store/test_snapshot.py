import json
import os
import zlib

import h5py
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.store.snapshot import (FORMAT, VERSION, SnapshotChain, SnapshotError, TableSnapshot, read_snapshot,
                                   write_snapshot, writer)
from gpuemb.store.snapshot.seal import seal

from .snapshot_files import resealed

ADAM = {"weights": [0, 4], "m": [4, 8], "v": [8, 12]}
ADAGRAD = {"weights": slice(0, 6), "sum_sq": slice(6, 7)}  # as optim.rowwise.row_layout gives it
SGD = {"weights": [0, 5]}


@pytest.fixture
def synced(monkeypatch):
    """``(path, existed)`` of each fsync the writer makes, in order; the fsyncs still happen."""
    calls, fsync = [], writer.fsync

    def record(path):
        calls.append((path, os.path.exists(path)))
        fsync(path)
    monkeypatch.setattr(writer, "fsync", record)
    return calls


def make_table(rng, n, layout, dtype="float32", steps=True, xp=np, config=None):
    width = TableSnapshot({}, layout).width
    keys = (rng.permutation(4 * n)[:n] - 2 * n).astype(np.int64) * 1_000_000_007  # distinct, signed, wide
    rows = rng.standard_normal((n, width)).astype(dtype) * 3
    st = rng.integers(1, 1000, n).astype(np.int32) if steps else None
    return TableSnapshot(config or {"dim": width, "dtype": dtype}, layout, xp.asarray(keys), xp.asarray(rows),
                         None if st is None else xp.asarray(st))


def by_key(t):
    """``{key: (row, step)}`` of a TableSnapshot, on the host."""
    keys, rows = to_host(t.keys), to_host(t.rows)
    steps = None if t.steps is None else to_host(t.steps)
    return {int(k): (rows[i], None if steps is None else int(steps[i])) for i, k in enumerate(keys)}


def assert_same(got, want):
    got, want = by_key(got), by_key(want)
    assert got.keys() == want.keys()
    for k, (row, step) in want.items():
        np.testing.assert_array_equal(got[k][0], row)
        assert got[k][1] == step


def test_round_trip_tables_of_each_kind(rng, tmp_path, xp):
    tables = {"adam": make_table(rng, 1000, ADAM, xp=xp), "half": make_table(rng, 333, SGD, "float16", steps=False),
              "adagrad": make_table(rng, 64, ADAGRAD, steps=False, config={"dim": 6, "rule": {"eps": np.float32(1)}}),
              "empty": TableSnapshot({"dim": 5}, SGD, np.empty(0, np.int64), np.empty((0, 5), np.float32))}
    path = tmp_path / "snap.h5"
    sid = write_snapshot(path, tables, meta={"step": 7}, chunk_rows=64)
    snap = read_snapshot(path)
    assert (snap.id, snap.kind, snap.base, snap.incremental, snap.meta) == (sid, "full", None, False, {"step": 7})
    assert snap.created.endswith("+00:00") and sorted(snap.tables) == sorted(tables)
    assert snap.tables["adam"].n_rows == 1000 and snap.tables["half"].dtype == np.float16
    assert snap.tables["adagrad"].layout == {"weights": [0, 6], "sum_sq": [6, 7]}
    assert snap.tables["adagrad"].config == {"dim": 6, "rule": {"eps": 1.0}}
    assert [len(k) for k, _, _ in snap.tables["adam"].chunks()] == [64] * 15 + [40]
    for name, t in tables.items():
        got = snap.tables[name].load_all()
        assert got.rows.dtype == np.dtype(t.rows.dtype) and (got.steps is None) == (t.steps is None)
        assert_same(got, t)
    assert snap.tables["empty"].load_all().rows.shape == (0, 5)


def test_a_table_bigger_than_a_chunk_streams_through(rng, tmp_path):
    n, width, pulled = 100_000, 8, []
    keys = rng.permutation(10 * n)[:n].astype(np.int64)
    rows = rng.standard_normal((n, width)).astype(np.float32)
    steps = rng.integers(0, 50, n)

    def pieces():  # uneven pieces that straddle the stored chunks
        for a in range(0, n, 7777):
            pulled.append(a)
            yield keys[a:a + 7777], rows[a:a + 7777], steps[a:a + 7777]

    table = TableSnapshot.from_chunks({"dim": width}, {"weights": [0, width]}, pieces())
    write_snapshot(tmp_path / "big.h5", {"big": table}, chunk_rows=4096)
    assert len(pulled) == 13
    t = read_snapshot(tmp_path / "big.h5").tables["big"]
    with h5py.File(tmp_path / "big.h5") as f:
        assert f["tables/big/rows"].chunks == (4096, width)
    got = list(t.chunks())
    assert [len(k) for k, _, _ in got] == [4096] * 24 + [n - 24 * 4096]
    np.testing.assert_array_equal(np.concatenate([k for k, _, _ in got]), keys)
    np.testing.assert_array_equal(np.concatenate([r for _, r, _ in got]), rows)
    np.testing.assert_array_equal(np.concatenate([s for _, _, s in got]), steps)


def updated(rng, t, pick, new_keys=()):
    """The rows of ``t`` at ``pick`` with fresh values, plus fresh rows for ``new_keys``: a dirty set."""
    keys = np.concatenate([t.keys[pick], np.asarray(new_keys, np.int64)])
    rows = rng.standard_normal((len(keys), t.rows.shape[1])).astype(t.rows.dtype) + 100
    steps = rng.integers(1000, 2000, len(keys)).astype(np.int32)
    return TableSnapshot(t.config, t.layout, keys, rows, steps)


def test_a_chain_gives_each_key_its_latest_row(rng, tmp_path):
    full = {"a": make_table(rng, 500, ADAM), "b": make_table(rng, 100, ADAM)}
    id0 = write_snapshot(tmp_path / "0.h5", full, chunk_rows=50)
    inc1 = {"a": updated(rng, full["a"], rng.choice(500, 80, replace=False), new_keys=[3, 5, 11])}
    id1 = write_snapshot(tmp_path / "1.h5", inc1, incremental=True, base=id0, chunk_rows=50)
    inc2 = {"a": updated(rng, inc1["a"], [0, 1, 81]), "b": updated(rng, full["b"], [4, 9])}  # 81: key 5 again
    id2 = write_snapshot(tmp_path / "2.h5", inc2, incremental=True, base=id1, chunk_rows=50)
    assert read_snapshot(tmp_path / "2.h5").base == id1

    chain = SnapshotChain([tmp_path / f"{i}.h5" for i in range(3)])
    assert chain.id == id2
    for name in full:
        want = by_key(full[name])
        for inc in (inc1, inc2):
            if name in inc:
                want.update(by_key(inc[name]))
        loaded = chain.tables[name].load_all()
        got = by_key(loaded)
        assert len(loaded.keys) == len(want) == len(full[name].keys) + 3 * (name == "a")  # each key once
        assert got.keys() == want.keys()
        for k, (row, step) in want.items():
            np.testing.assert_array_equal(got[k][0], row)
            assert got[k][1] == step
    assert by_key(chain.tables["a"].load_all())[5][0][0] > 50  # key 5 came new in inc1, then changed in inc2


def test_a_chain_with_the_wrong_base_names_both_ids(rng, tmp_path):
    t = {"a": make_table(rng, 10, SGD)}
    id_a = write_snapshot(tmp_path / "a.h5", t)
    id_b = write_snapshot(tmp_path / "b.h5", t)
    id_inc = write_snapshot(tmp_path / "inc.h5", t, incremental=True, base=id_b)
    with pytest.raises(SnapshotError, match=f"inc.h5: applies on snapshot {id_b}.*a.h5, is {id_a}"):
        SnapshotChain([tmp_path / "a.h5", tmp_path / "inc.h5"])
    with pytest.raises(SnapshotError, match=f"inc.h5: is an incremental snapshot on base {id_b}"):
        SnapshotChain([tmp_path / "inc.h5"])
    with pytest.raises(SnapshotError, match=f"a.h5: is a full snapshot \\({id_a}\\) inside a chain"):
        SnapshotChain([tmp_path / "b.h5", tmp_path / "a.h5"])
    assert SnapshotChain([tmp_path / "b.h5", tmp_path / "inc.h5"]).id == id_inc
    with pytest.raises(ValueError, match="needs the id"):
        write_snapshot(tmp_path / "c.h5", t, incremental=True)


def test_a_crash_mid_write_keeps_the_earlier_snapshot(rng, tmp_path, synced):
    path = tmp_path / "snap.h5"
    old = make_table(rng, 300, ADAM)
    old_id = write_snapshot(path, {"a": old}, chunk_rows=32)

    def crashing():
        yield to_host(old.keys[:100]), old.rows[:100] * 2, old.steps[:100]
        yield to_host(old.keys[100:200]), old.rows[100:200] * 2, old.steps[100:200]
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_snapshot(path, {"a": TableSnapshot.from_chunks(old.config, old.layout, crashing())}, chunk_rows=32)
    assert os.listdir(tmp_path) == ["snap.h5"]
    assert len(synced) == 2  # only the first write's file and folder: the failed one renamed nothing
    snap = read_snapshot(path)
    assert snap.id == old_id
    assert_same(snap.tables["a"].load_all(), old)


def test_the_file_is_synced_before_the_rename_and_the_folder_after(rng, tmp_path, synced):
    write_snapshot(tmp_path / "snap.h5", {"a": make_table(rng, 10, SGD)})
    (tmp, tmp_existed), (folder, _) = synced
    assert os.path.dirname(tmp) == str(tmp_path) and os.path.basename(tmp).startswith(".snap.h5.tmp-")
    assert tmp_existed and not os.path.exists(tmp) and folder == str(tmp_path)


@pytest.fixture
def written(rng, tmp_path):
    path = tmp_path / "snap.h5"
    write_snapshot(path, {"emb": make_table(rng, 200, ADAM)}, chunk_rows=32)
    return path


@pytest.mark.parametrize("part", ["keys", "rows", "steps"])
def test_flipped_bytes_in_a_chunk_are_reported_by_table_and_chunk(written, part):
    with h5py.File(written) as f:
        info = f[f"tables/emb/{part}"].id.get_chunk_info(2)  # rows 64:96
    with open(written, "r+b") as fh:
        fh.seek(info.byte_offset + 5)
        b = fh.read(2)
        fh.seek(info.byte_offset + 5)
        fh.write(bytes(x ^ 0xFF for x in b))
    seal(written, VERSION)  # the seal would catch it first (test_snapshot_seal.py): here the chunk's checksum does
    t = read_snapshot(written).tables["emb"]
    with pytest.raises(SnapshotError, match=f"snap.h5: table 'emb', chunk 2 \\(rows 64:96\\): the {part} checksum"):
        t.load_all()
    chunks = read_snapshot(written, verify=False).tables["emb"].chunks()
    assert len(list(chunks)) == 7  # unchecked, the bad bytes load: so checking is what catches them


def test_a_truncated_file_is_reported(written):
    size = os.path.getsize(written)
    with open(written, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(SnapshotError, match=r"snap.h5: is \d+ bytes, but its seal says \d+; the file is truncated"):
        read_snapshot(written)


@pytest.mark.parametrize("part", ["keys", "rows", "steps", "checksums"])
def test_a_missing_dataset_is_reported(written, part):
    with resealed(written) as f:
        del f[f"tables/emb/{part}"]
    with pytest.raises(SnapshotError, match=f"snap.h5: table 'emb': dataset '{part}' is missing"):
        read_snapshot(written)


def test_a_short_dataset_is_reported(written):
    with resealed(written) as f:
        f["tables/emb/rows"].resize(150, axis=0)
    with pytest.raises(SnapshotError, match=r"'rows' has shape \(150, 12\), but the attributes say \(200, 12\)"):
        read_snapshot(written)


@pytest.mark.parametrize("attr, value, message", [
    ("format", "gpuemb-shard", "format is 'gpuemb-shard', not 'gpuemb-snapshot'"),
    ("version", 99, "snapshot version 99, but this gpuemb reads version 1"),
    ("kind", "partial", "kind 'partial'")])
def test_a_wrong_format_or_version_is_reported(written, attr, value, message):
    with resealed(written) as f:
        f.attrs[attr] = value
    with pytest.raises(SnapshotError, match=f"snap.h5: {message}"):
        read_snapshot(written)


def test_a_file_that_is_not_hdf5_or_not_there_is_reported(tmp_path):
    (tmp_path / "junk.h5").write_bytes(os.urandom(4096))
    with pytest.raises(SnapshotError, match="junk.h5: starts with neither a gpuemb snapshot's seal nor HDF5's"):
        read_snapshot(tmp_path / "junk.h5")
    with pytest.raises(SnapshotError, match="nope.h5: no such snapshot file"):
        read_snapshot(tmp_path / "nope.h5")


def test_plain_h5py_reads_the_weights_per_key(rng, tmp_path):
    t = make_table(rng, 150, ADAM)
    write_snapshot(tmp_path / "snap.h5", {"emb": t}, chunk_rows=64)
    with h5py.File(tmp_path / "snap.h5", "r") as f:
        assert f.attrs["format"].decode() == FORMAT and f.attrs["kind"] == b"full"  # text is stored as bytes
        g = f["tables/emb"]
        start, stop = json.loads(g.attrs["layout"])["weights"]
        weights = dict(zip(g["keys"][:].tolist(), g["rows"][:, start:stop]))
        c, sums = int(g.attrs["chunk_rows"]), g["checksums"][:]
        for i in range(len(sums)):
            assert [zlib.crc32(g[p][i * c:(i + 1) * c]) for p in ("keys", "rows", "steps")] == sums[i].tolist()
    assert len(weights) == 150 and len(sums) == 3
    for k, row in zip(t.keys.tolist(), t.rows):
        np.testing.assert_array_equal(weights[k], row[:4])


def test_bad_tables_are_refused_before_anything_is_written(rng, tmp_path):
    keys, rows = np.arange(4), rng.standard_normal((4, 3)).astype(np.float32)
    cases = [(TableSnapshot({}, {"m": [0, 1], "weights": [1, 3]}, keys, rows), "must start with 'weights'"),
             (TableSnapshot({}, {"weights": [0, 3]}, keys, rows.astype(np.int32)), "rows are int32"),
             (TableSnapshot({}, {"weights": [0, 3]}, keys), "give either keys and rows"),
             (TableSnapshot.from_chunks({}, {"weights": [0, 3]}, [(keys, rows, None), (keys, rows[:, :2], None)]),
              r"rows float32\(4, 2\), steps None, after rows of float32 and width 3")]
    for table, message in cases:
        with pytest.raises(ValueError, match=message):
            write_snapshot(tmp_path / "snap.h5", {"t": table})
    assert os.listdir(tmp_path) == []


def test_a_chain_refuses_a_table_whose_layout_changed(rng, tmp_path):
    base = write_snapshot(tmp_path / "0.h5", {"t": make_table(rng, 20, ADAM)})
    write_snapshot(tmp_path / "1.h5", {"t": make_table(rng, 5, ADAGRAD)}, incremental=True, base=base)
    with pytest.raises(SnapshotError, match="table 't': its layout, row dtype or steps differ"):
        SnapshotChain([tmp_path / "0.h5", tmp_path / "1.h5"])
