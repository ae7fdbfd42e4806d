"""The loader: each row once per epoch, disjoint ranks, seeded order, exact resume, whole-chunk reads, and batches
staged on the rank's GPU from the prefetch thread (each rank's part of the global batches: test_rank_loader.py)."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.convert import convert
from gpuemb.io.criteo import criteo_schema
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions
from gpuemb.io.synthetic import SyntheticConfig, SyntheticSource

N = 1000


@pytest.fixture
def source(tmp_path, rng):
    """1000 rows in 4 shards of chunks of 16 rows; dense[:, 0] is the row's number."""
    dense = np.c_[np.arange(N), rng.random(N)].astype(np.float32)
    batch = Batch(rng.random(N).astype(np.float32), dense, rng.integers(0, 1 << 40, (N, 2)))
    writer = ShardWriter(tmp_path, ShardLayout(("y",), ("row", "x"), ("a", "b")), WriteOptions(16, 320))
    writer.append(batch)
    with ShardSource(writer.close()) as src:
        yield src


def rows_of(batches):
    return np.concatenate([b.dense[:, 0] for b in batches]).astype(np.int64)


def test_every_row_once_per_epoch_in_a_seeded_order(source):
    loader = Loader(source, LoaderConfig(batch_size=64, drop_last=False, seed=1))
    first, second = rows_of(loader), rows_of(loader)
    for epoch in (first, second):
        np.testing.assert_array_equal(np.sort(epoch), np.arange(N))
    assert not np.array_equal(first, np.arange(N)) and not np.array_equal(first, second)
    again = Loader(source, LoaderConfig(batch_size=64, drop_last=False, seed=1))
    np.testing.assert_array_equal(rows_of(again), first)
    other = Loader(source, LoaderConfig(batch_size=64, drop_last=False, seed=2))
    assert not np.array_equal(rows_of(other), first)
    unshuffled = Loader(source, LoaderConfig(batch_size=64, drop_last=False, shuffle=False))
    np.testing.assert_array_equal(rows_of(unshuffled), np.arange(N))


def test_batches_are_full_and_the_last_is_dropped_or_kept(source):
    kept = list(Loader(source, LoaderConfig(batch_size=64, drop_last=False)))
    dropped = list(Loader(source, LoaderConfig(batch_size=64)))
    assert [b.rows for b in kept] == [64] * 15 + [40]
    assert [b.rows for b in dropped] == [64] * 15 and len(Loader(source, LoaderConfig(64))) == 15
    np.testing.assert_array_equal(rows_of(dropped), rows_of(kept)[:960])


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_see_disjoint_parts_that_cover_every_row(source, world):
    parts = [list(Loader(source, LoaderConfig(32, drop_last=False, seed=4, rank=r, world_size=world)))
             for r in range(world)]
    np.testing.assert_array_equal(np.sort(np.concatenate([rows_of(p) for p in parts])), np.arange(N))
    for batch in zip(*parts):  # each global batch's parts differ by at most one row
        assert max(b.rows for b in batch) - min(b.rows for b in batch) <= 1


@pytest.mark.parametrize("stop_after", [0, 5, 15, 16])
def test_resume_yields_exactly_what_an_uninterrupted_run_would(source, stop_after):
    config = LoaderConfig(batch_size=120, drop_last=False, seed=7, rank=1, world_size=2, prefetch=2)
    whole = Loader(source, config)
    expected = [rows_of(whole), rows_of(whole)]  # two epochs of 9 parts each: 8 of 60 rows and one of 20
    expected = [b for epoch in expected for b in np.split(epoch, np.arange(60, epoch.size, 60))]
    first = Loader(source, config)
    got = []
    while len(got) < stop_after:
        for b in first:
            got.append(b.dense[:, 0].astype(np.int64))
            if len(got) == stop_after:
                break
    state = first.state_dict()
    resumed = Loader(source, config)
    resumed.load_state_dict(state)
    while len(got) < len(expected):
        got += [b.dense[:, 0].astype(np.int64) for b in resumed]
    assert len(got) == len(expected) == 18
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_resume_refuses_other_settings(source):
    state = Loader(source, LoaderConfig(32, seed=1)).state_dict()
    with pytest.raises(ValueError, match="seed was 1 when saved and is 2 now"):
        Loader(source, LoaderConfig(32, seed=2)).load_state_dict(state)


def test_shard_blocks_are_whole_chunks(source):
    assert (source.blocks[:, 1] % 16 == 0).all() and (source.block_sizes <= 16).all()
    assert source.block_sizes.sum() == N and source.blocks[:, 0].max() == 3


class SlowSource:
    """A source whose reads take 5 ms a block, so that a consumer must wait."""

    def __init__(self, inner):
        self.inner, self.n_rows, self.block_sizes = inner, inner.n_rows, inner.block_sizes

    def read_block(self, i):
        time.sleep(0.005)
        return self.inner.read_block(i)


def test_counters_report_rows_and_stalls(source):
    loader = Loader(SlowSource(source), LoaderConfig(batch_size=100))
    total = sum(b.rows for b in loader)
    stats = loader.stats()
    assert stats["rows"] == total == 1000 and stats["batches"] == 10
    assert 0 < stats["rows_per_s"] < 1000 / 0.3  # 63 blocks of 5 ms
    assert stats["stalls"] >= 5 and stats["stall_s"] > 0.1


def test_loads_converted_sample_and_synthetic_source(data, tmp_path):
    report = convert([data / "criteo_sample.tsv"], tmp_path, criteo_schema())
    with ShardSource(report.paths["train"]) as src:
        sparse = np.concatenate([b.sparse for b in Loader(src, LoaderConfig(50, seed=3))])
        whole = src.read_block(0).sparse
    assert sorted(map(bytes, sparse)) == sorted(map(bytes, whole))
    syn = SyntheticSource(SyntheticConfig(n_dense=2, cardinalities=(30, 40)), 500, block_rows=64)
    batches = list(Loader(syn, LoaderConfig(100, shuffle=False)))
    np.testing.assert_array_equal(np.concatenate([b.sparse for b in batches]),
                                  np.concatenate([syn.read_block(i).sparse for i in range(8)]))


ON_THE_SECOND_GPU = """
import numpy as np
from gpuemb.autograd import backend
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.synthetic import SyntheticConfig, SyntheticSource

backend.xp.cuda.Device(1).use()  # this rank's GPU; the prefetch thread starts on GPU 0
source = SyntheticSource(SyntheticConfig(n_dense=3, cardinalities=(30, 40)), 300, block_rows=64)
batches = list(Loader(source, LoaderConfig(64, shuffle=False, drop_last=False, prefetch=2)))
assert all(backend.is_device_array(b.sparse) and backend.is_device_array(b.dense) for b in batches)
for name in ("label", "dense", "sparse"):
    got = np.concatenate([backend.to_host(getattr(b, name)) for b in batches])
    np.testing.assert_array_equal(got, np.concatenate([getattr(source.read_block(i), name) for i in range(5)]))
print("batches", len(batches), "on device", backend.xp.cuda.Device().id)
"""


def test_batches_are_staged_on_the_ranks_gpu_not_the_prefetch_threads():
    # a subprocess, so that the emulated device, its two GPUs and the current one stay there
    env = {**os.environ, "GPUEMB_DEVICE": "emulated", "GPUEMB_EMULATED_GPUS": "2"}
    done = subprocess.run([sys.executable, "-c", ON_THE_SECOND_GPU], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["batches", "5", "on", "device", "1"], done.stdout


@pytest.mark.parametrize("world", [1, 3])
def test_a_capped_padded_epoch_gives_every_rank_a_part_of_every_batch(source, world):
    """Evaluation's settings: the first 330 rows in batches of 64, the last (10 rows) and a cap that leaves 2 rows
    padded to 8 by repeating their last row before the ranks take their parts; parts in rank order, then
    cut to the batch, are the rows in order."""
    for cap, last in ((330, 10), (322, 2)):
        parts = [list(Loader(source, LoaderConfig(64, shuffle=False, drop_last=False, max_rows=cap, pad_to=8,
                                                  rank=r, world_size=world)))
                 for r in range(world)]
        sizes = [64] * 5 + [last]
        assert all(len(p) == len(sizes) for p in parts)  # no rank misses a batch
        at = 0
        for n, batch in zip(sizes, zip(*parts)):
            whole = rows_of(batch)
            assert whole.size == max(n, 8) and all(b.rows for b in batch)
            np.testing.assert_array_equal(whole[:n], np.arange(at, at + n))
            np.testing.assert_array_equal(whole[n:], at + n - 1)  # the padding: the batch's last row again
            at += n


def test_cap_and_padding_must_not_be_negative(source):
    for bad in ({"max_rows": -1}, {"pad_to": -2}):
        with pytest.raises(ValueError, match="must be >= 0"):
            Loader(source, LoaderConfig(64, **bad))
