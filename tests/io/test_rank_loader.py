"""Each rank's loader yields its part of every global batch, the rows one process's loader yields cut as ranks
train on them, bit for bit; it reads only the blocks (and makes only the synthetic rows) of its parts; and a
resume continues each rank, at the same or another world size."""
import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions
from gpuemb.io.synthetic import SyntheticConfig, SyntheticSource

N, CHUNK = 1000, 16


@pytest.fixture
def shards(tmp_path, rng):
    """1000 rows in shards of chunks of 16 rows; dense[:, 0] is the row's number."""
    dense = np.c_[np.arange(N), rng.random(N)].astype(np.float32)
    batch = Batch(rng.random(N).astype(np.float32), dense, rng.integers(0, 1 << 40, (N, 2)))
    writer = ShardWriter(tmp_path, ShardLayout(("y",), ("row", "x"), ("a", "b")), WriteOptions(CHUNK, 320))
    writer.append(batch)
    with pytest.warns(UserWarning, match="no manifest.json"), ShardSource(writer.close()) as source:
        yield source


@pytest.fixture
def synthetic():
    return SyntheticSource(SyntheticConfig(n_dense=2, cardinalities=(30, 40), seed=5), N, block_rows=64)


def batches(source, epochs=2, **config):
    """Every batch the loader yields in ``epochs`` epochs (two: across an epoch boundary), and the loader."""
    loader = Loader(source, LoaderConfig(**{"seed": 3, "shuffle_window": 3, "prefetch": 2, **config}))
    return [b for _ in range(epochs) for b in loader], loader


def same(a, b):
    for x, y in zip(a.arrays(), b.arrays()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind, batch, drop_last", [("shards", 64, True), ("shards", 60, False),
                                                    ("synthetic", 64, True), ("synthetic", 60, False)])
def test_each_rank_yields_its_slice_of_every_global_batch(kind, batch, drop_last, world, request):
    source = request.getfixturevalue(kind)
    whole, _ = batches(source, batch_size=batch, drop_last=drop_last)
    assert len(whole) == 2 * (N // batch if drop_last else -(-N // batch))
    for rank in range(world):
        mine, _ = batches(source, batch_size=batch, drop_last=drop_last, rank=rank, world_size=world)
        assert len(mine) == len(whole)
        for got, glob in zip(mine, whole):  # the slice the ranks took of one process's batch until now
            n = glob.rows
            same(got, glob.slice(rank * n // world, (rank + 1) * n // world))


@pytest.mark.parametrize("world", [2, 4])
def test_a_rank_makes_only_its_own_synthetic_rows(synthetic, world):
    _, one = batches(synthetic, epochs=1, batch_size=64)
    made = []
    for rank in range(world):
        mine, loader = batches(synthetic, epochs=1, batch_size=64, rank=rank, world_size=world)
        stats = loader.stats()
        assert stats["rows"] == stats["rows_read"] == len(mine) * 64 // world
        assert stats["bytes_read"] == stats["rows_read"] * (4 + 2 * 4 + 2 * 8)  # label, dense, sparse
        made.append(stats["rows_read"])
    assert sum(made) == one.stats()["rows_read"] == (N // 64) * 64


@pytest.mark.parametrize("world", [2, 4])
def test_a_rank_reads_only_the_blocks_that_hold_its_rows(shards, world):
    # in order, a part of 4 whole blocks: every block read is one rank's alone
    config = {"epochs": 1, "batch_size": 4 * CHUNK * world, "shuffle": False}
    _, one = batches(shards, **config)
    read = [batches(shards, **config, rank=r, world_size=world)[1].stats() for r in range(world)]
    for key in ("blocks_read", "rows_read", "bytes_read"):
        assert sum(s[key] for s in read) == one.stats()[key] > 0
    assert all(s["blocks_read"] == one.stats()["blocks_read"] // world for s in read)
    # shuffled windows of 3 blocks: each batch draws on every block of its window, but a rank stages its own rows
    _, shuffled = batches(shards, epochs=1, batch_size=64, rank=0, world_size=world)
    assert shuffled.stats()["rows"] == (N // 64) * 64 // world


@pytest.mark.parametrize("kind", ["shards", "synthetic"])
@pytest.mark.parametrize("saved, resumed", [(2, 2), (4, 4), (2, 4), (4, 1)])
def test_a_resume_mid_epoch_continues_every_rank(kind, saved, resumed, request):
    source = request.getfixturevalue(kind)
    config = {"batch_size": 96, "drop_last": False}
    whole, _ = batches(source, **config)  # 11 global batches an epoch, the last of 40 rows
    states = []
    for rank in range(saved):
        loader = Loader(source, LoaderConfig(seed=3, shuffle_window=3, rank=rank, world_size=saved, **config))
        for i, _ in enumerate(loader):
            if i == 6:
                break
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states) and states[0]["position"] == 7 * 96  # the global batches' position
    for rank in range(resumed):
        loader = Loader(source, LoaderConfig(seed=3, shuffle_window=3, rank=rank, world_size=resumed, **config))
        # a checkpoint from before each rank read its own data also holds the loader's rank 0 of world size 1
        loader.load_state_dict({**states[0], "rank": 0, "world_size": 1} if rank else states[0])
        rest = [b for _ in range(2) for b in loader]
        assert len(rest) == len(whole) - 7
        for got, glob in zip(rest, whole[7:]):
            n = glob.rows
            same(got, glob.slice(rank * n // resumed, (rank + 1) * n // resumed))

