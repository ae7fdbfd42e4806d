"""A snapshot's optional datasets (``pending``, ``ticks``, a delta's ``deleted``) are required where the snapshot
says it holds them: one renamed by a flipped byte is a SnapshotError naming the file and the dataset, not an
absence that a resume, or a delta's consumer, would go on without."""
import h5py
import numpy as np
import pytest

from gpuemb.store.snapshot import SnapshotError, apply_delta, load_snapshot, read_snapshot, save_delta, \
    save_snapshot, write_snapshot
from gpuemb.store.table import EmbeddingTable

from .snapshot_files import as_version, resealed, with_extras
from .test_delta import config, state, train


def renamed(path, group, name, version):
    """``path`` with dataset ``name`` of ``group`` renamed as one flipped bit would, as ``version`` writes it (an
    older version unsealed, version 3 sealed again, so that the seal does not catch it first)."""
    if version < 3:
        path = as_version(path, path.with_name(f"v{version}-{path.name}"), version)
    with resealed(path) if version == 3 else h5py.File(path, "a") as f:
        f[group].move(name, name[:-1] + chr(ord(name[-1]) ^ 1))
    return path


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("name", ["pending", "ticks", "pending_checksums"])
def test_a_renamed_extra_of_a_snapshot_is_a_snapshot_error(tmp_path, rng, name, version):
    path = tmp_path / "snap.h5"
    write_snapshot(path, {"emb": with_extras(rng)}, chunk_rows=32)
    path = renamed(path, "tables/emb", name, version)
    with pytest.raises(SnapshotError, match=f"snap.h5: table 'emb': dataset '{name}' is missing, but"):
        read_snapshot(path)


@pytest.mark.parametrize("name", ["pending", "ticks"])
def test_a_flipped_byte_in_an_old_snapshots_dataset_name_is_a_snapshot_error(tmp_path, rng, name):
    # what the fuzzer found: the reader took the state as absent, and a resume trained on without it
    write_snapshot(tmp_path / "new.h5", {"emb": with_extras(rng)})
    old = as_version(tmp_path / "new.h5", tmp_path / "old.h5", 2)
    data = bytearray(old.read_bytes())
    at = data.index(name.encode() + b"\0")  # the link's name, in the group's local heap
    data[at + 1] ^= 0x01
    old.write_bytes(data)
    with pytest.raises(SnapshotError, match=f"old.h5: table 'emb': dataset '{name}' is missing, but the other of"):
        read_snapshot(old)


def trained_delta(tmp_path, rng):
    """``(base, delta)``: a restored copy of a trained table at its marker, and the path of its delta after more
    training and deletes."""
    live = EmbeddingTable(config("host", tmp_path, track_updates=True))
    train(live, rng, 10)
    since = live.marker()
    save_snapshot(live, tmp_path / "base.h5")
    train(live, rng, 5)
    live.delete(rng.choice(np.concatenate(list(live.keys())), 15, replace=False))
    save_delta(live, tmp_path / "delta.h5", since)
    base = EmbeddingTable(config("host", tmp_path))
    load_snapshot(base, [tmp_path / "base.h5"])
    return base, tmp_path / "delta.h5"


@pytest.mark.parametrize("version", [2, 3])
def test_a_delta_whose_deleted_keys_were_renamed_is_refused_and_changes_nothing(tmp_path, rng, version):
    base, delta = trained_delta(tmp_path, rng)
    assert read_snapshot(delta).tables["t"].extra("deleted").size == 15
    before = state(base)
    delta = renamed(delta, "tables/t", "deleted", version)
    with pytest.raises(SnapshotError, match="delta.h5: table 't': dataset 'deleted' is missing, but"):
        apply_delta(base, delta)
    for a, b in zip(before, state(base)):
        np.testing.assert_array_equal(a, b)


def test_an_older_delta_applies_as_it_did(tmp_path, rng):
    base, delta = trained_delta(tmp_path, rng)
    old = EmbeddingTable(config("host", tmp_path))
    load_snapshot(old, [tmp_path / "base.h5"])
    apply_delta(base, delta)
    apply_delta(old, as_version(delta, tmp_path / "old.h5", 2))
    for a, b in zip(state(base), state(old)):
        np.testing.assert_array_equal(a, b)
