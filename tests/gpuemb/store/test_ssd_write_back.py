"""The SSD tier writes rows back in the background: a table over it still trains bit for bit like a device table,
a snapshot waits for the writes before its rename, a failed write stops the snapshot, and a crash with writes in
flight leaves the last snapshot whole."""
import errno
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store.errors import SsdFileError
from gpuemb.store.options import StoreOptions, TableConfig
from gpuemb.store.snapshot import load_snapshot, save_snapshot, writer
from gpuemb.store.table import EmbeddingTable

DIM, BATCH, IDS = 8, 64, 600


def config(options):
    return TableConfig("t", DIM, rule=RowwiseAdagradRule(), lr=0.05, options=options)


def ssd(path):
    """A table whose rows go up and down all the time: 64-row device cache, 128-row host cache, 16-row chunks."""
    return EmbeddingTable(config(StoreOptions("ssd", cache_rows=BATCH, host_cache_rows=128, ssd_path=str(path),
                                              slab_rows=256, chunk_rows=16)))


def steps(rng, n):
    for _ in range(n):
        yield rng.choice(IDS, BATCH, replace=False), rng.standard_normal((BATCH, DIM)).astype(np.float32)


def train(tables, batches):
    for keys, grad in batches:
        for t in tables:
            t.lookup(keys).backward(grad)


def rows_of(table):
    keys, rows, got_steps = (np.concatenate(p) for p in zip(*table.export()))
    order = np.argsort(keys)
    return keys[order], rows[order], got_steps[order]


def slow_writes(monkeypatch, seconds=0.01):
    real = os.pwritev

    def slow(fd, buffers, offset):
        time.sleep(seconds)
        return real(fd, buffers, offset)
    monkeypatch.setattr(os, "pwritev", slow)


def test_the_snapshot_waits_for_the_writes_and_holds_the_newest_rows(rng, tmp_path, monkeypatch):
    slow_writes(monkeypatch)
    table, device = ssd(tmp_path / "t.h5"), EmbeddingTable(config(StoreOptions()))
    train([table, device], steps(rng, 30))
    tier = table.home.tier
    assert tier.chunks_written > 0
    pending_at_rename = []
    real_replace = os.replace

    def replace(src, dst):
        pending_at_rename.append(tier.pending_writes)
        real_replace(src, dst)
    monkeypatch.setattr(writer.os, "replace", replace)
    save_snapshot(table, tmp_path / "snap.h5")
    assert pending_at_rename == [0]
    restored = EmbeddingTable(config(StoreOptions()))
    load_snapshot(restored, [tmp_path / "snap.h5"])
    for a, b in zip(rows_of(restored), rows_of(device)):
        np.testing.assert_array_equal(a, b)
    table.close()


def test_a_failed_write_stops_the_snapshot_and_keeps_the_last_one(rng, tmp_path, monkeypatch):
    table = ssd(tmp_path / "t.h5")
    train([table], steps(rng, 10))
    save_snapshot(table, tmp_path / "snap.h5")
    before = (tmp_path / "snap.h5").read_bytes()

    def full(fd, buffers, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(SsdFileError, match="No space left on device"):
        train([table], steps(rng, 10))
        save_snapshot(table, tmp_path / "snap.h5")
    assert (tmp_path / "snap.h5").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".snap")] == []  # no temp file left
    table.close()


CRASH = """
    import os, sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_ssd_write_back import EmbeddingTable, StoreOptions, config, rows_of, save_snapshot, ssd, steps, train
    real = os.pwritev
    def slow(fd, buffers, offset):
        time.sleep(0.05)
        return real(fd, buffers, offset)
    os.pwritev = slow
    rng = np.random.default_rng({seed})
    table, device = ssd({path!r}), EmbeddingTable(config(StoreOptions()))
    train([table, device], steps(rng, 20))
    save_snapshot(table, {snap!r})
    np.savez({ref!r}, *rows_of(device))
    train([table], steps(rng, 20))  # more rows written back, the disk far behind
    print(table.home.tier.pending_writes, flush=True)
    os._exit(0)  # a crash: no close, writes in flight
"""


def test_a_crash_with_writes_in_flight_leaves_the_snapshot_whole(rng, tmp_path):
    paths = {k: str(tmp_path / f"{k}.h5") for k in ("path", "snap")}
    code = CRASH.format(tests=os.path.dirname(__file__), seed=int(rng.integers(1 << 30)), ref=str(tmp_path / "ref.npz"),
                        **paths)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 0  # it did crash with writes in flight
    restored = EmbeddingTable(config(StoreOptions()))
    load_snapshot(restored, [paths["snap"]])
    ref = np.load(tmp_path / "ref.npz")
    for a, b in zip(rows_of(restored), (ref[f"arr_{i}"] for i in range(3))):
        np.testing.assert_array_equal(a, b)
