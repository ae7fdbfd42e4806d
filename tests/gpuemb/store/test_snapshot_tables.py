import numpy as np
import pytest

from gpuemb.autograd import Tensor, bce_with_logits
from gpuemb.optim import AdamRule
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.snapshot import SnapshotError, load_snapshot, read_snapshot, save_snapshot

from .snapshot_files import resealed

D, F, B, KEYS = 4, 2, 16, 200
HOST = StoreOptions("host", cache_rows=24, slab_rows=32)  # a batch's 16 keys fit; the ~100 in play do not
DEVICE = StoreOptions(slab_rows=32)


def model(options, rule=AdamRule(), lr=0.05):
    configs = [TableConfig(f"f{f}", D, initializer=Initializer(seed=f), rule=rule, lr=lr, options=options)
               for f in range(F)]
    return EmbeddingCollection(configs)


def stream(rng, n):
    """``n`` batches of ``(sparse [B, F], labels [B, 1])`` on a fixed head ``w [F·D, 1]``."""
    return [(rng.integers(0, KEYS, (B, F)), rng.integers(0, 2, (B, 1)).astype(np.float32)) for _ in range(n)]


def train(c, batches, w):
    """Gradients that depend on the rows, so any row restored wrong changes every later update."""
    for sparse, labels in batches:
        bce_with_logits(c(sparse).reshape(B, F * D) @ Tensor(w), Tensor(labels)).backward()


def exported(table):
    """``(keys, rows, steps)`` of every row, sorted by key: the tables' order of export depends on their history."""
    keys, rows, steps = (np.concatenate(p) for p in zip(*table.export(chunk=37)))
    order = np.argsort(keys)
    return keys[order], rows[order], steps[order]


@pytest.mark.parametrize("options", [HOST, DEVICE], ids=["host", "device"])
def test_a_restored_run_continues_bit_for_bit(options, rng, tmp_path):
    w = rng.standard_normal((F * D, 1)).astype(np.float32)
    batches = stream(rng, 14)
    whole = model(options)
    train(whole, batches, w)

    first = model(options)
    train(first, batches[:6], w)
    full = save_snapshot(first.tables, tmp_path / "s0.h5")
    train(first, batches[6:9], w)
    save_snapshot(first.tables, tmp_path / "s1.h5", incremental=True, base=full)
    incremental = read_snapshot(tmp_path / "s1.h5").tables["f0"]
    assert 0 < incremental.n_rows < len(first.tables[0])  # only the rows the last three batches touched
    train(first, batches[9:10], w)  # updates after the last save are lost with the process

    resumed = model(options)
    load_snapshot(resumed.tables, [tmp_path / "s0.h5", tmp_path / "s1.h5"])
    train(resumed, batches[9:], w)
    for a, b in zip(whole.tables, resumed.tables):
        for want, got in zip(exported(a), exported(b)):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if options is HOST:
        assert resumed.tables[0].stats()["levels"][0]["evictions"] > 0


def test_a_corrupt_snapshot_changes_nothing(rng, tmp_path):
    first = model(HOST)
    train(first, stream(rng, 4), rng.standard_normal((F * D, 1)).astype(np.float32))
    full = save_snapshot(first.tables, tmp_path / "s0.h5")
    train(first, stream(rng, 2), rng.standard_normal((F * D, 1)).astype(np.float32))
    save_snapshot(first.tables, tmp_path / "s1.h5", incremental=True, base=full)
    with resealed(tmp_path / "s1.h5") as f:  # the last table of the last file: all else reads well first
        f["tables/f1/rows"][0, 0] += 1
    fresh = model(HOST)
    with pytest.raises(SnapshotError, match="f1.*rows checksum"):
        load_snapshot(fresh.tables, [tmp_path / "s0.h5", tmp_path / "s1.h5"])
    assert [len(t) for t in fresh.tables] == [0, 0]
    load_snapshot(fresh.tables, [tmp_path / "s0.h5"])
    assert len(fresh.tables[1]) > 0


def test_a_table_of_another_config_is_refused(rng, tmp_path):
    saved = model(DEVICE)
    train(saved, stream(rng, 2), rng.standard_normal((F * D, 1)).astype(np.float32))
    save_snapshot(saved.tables, tmp_path / "s0.h5")
    other = model(DEVICE, AdamRule(betas=(0.8, 0.999)), lr=0.1)
    with pytest.raises(SnapshotError, match=r"f0.*lr is 0\.05 there and 0\.1 here; rule\.betas"):
        load_snapshot(other.tables, [tmp_path / "s0.h5"])
    assert [len(t) for t in other.tables] == [0, 0]
    elsewhere = model(HOST)  # where the rows live is not part of what they are
    load_snapshot(elsewhere.tables, [tmp_path / "s0.h5"])
    for a, b in zip(saved.tables, elsewhere.tables):
        np.testing.assert_array_equal(exported(a)[1], exported(b)[1])


def test_a_bounded_table_takes_only_full_snapshots_that_fit(rng, tmp_path):
    c = model(StoreOptions(max_rows=64))
    train(c, stream(rng, 8), rng.standard_normal((F * D, 1)).astype(np.float32))
    full = save_snapshot(c.tables, tmp_path / "s0.h5")
    with pytest.raises(ValueError, match=r"\['f0', 'f1'\] drop keys past max_rows"):
        save_snapshot(c.tables, tmp_path / "s1.h5", incremental=True, base=full)
    small = model(StoreOptions(max_rows=32))
    with pytest.raises(ValueError, match="64 keys in the snapshot, more than its max_rows=32"):
        load_snapshot(small.tables, [tmp_path / "s0.h5"])
    assert [len(t) for t in small.tables] == [0, 0]


def test_a_restore_holds_one_chunk_at_a_time(rng, tmp_path, monkeypatch):
    """A table larger than memory restores: rows go in a stored chunk at a time, never staged whole."""
    import functools

    from gpuemb.store import snapshot
    from gpuemb.store.snapshot import tables

    monkeypatch.setattr(tables, "write_snapshot", functools.partial(snapshot.write_snapshot, chunk_rows=16))
    first = model(DEVICE)
    train(first, stream(rng, 6), rng.standard_normal((F * D, 1)).astype(np.float32))
    save_snapshot(first.tables, tmp_path / "s0.h5")

    def refuse(self):
        raise AssertionError("load_snapshot staged a whole table")

    for cls in (snapshot.SnapshotTable, snapshot.ChainTable):
        monkeypatch.setattr(cls, "load_all", refuse)
    fresh = model(DEVICE)
    sizes = []
    for t in fresh.tables:
        real = t.import_rows
        monkeypatch.setattr(t, "import_rows", lambda k, r, s, real=real: (sizes.append(k.size), real(k, r, s)))
    load_snapshot(fresh.tables, [tmp_path / "s0.h5"])
    assert max(sizes) <= 16 and sum(sizes) == sum(len(t) for t in first.tables) > 100
    for a, b in zip(first.tables, fresh.tables):
        for want, got in zip(exported(a), exported(b)):
            np.testing.assert_array_equal(got, want)
