"""Jagged features through shards and the loader: written, read back, shuffled, split between ranks, resumed and
checked, against the rows as they were made."""
import h5py
import numpy as np
import pytest

from gpuemb.io.bags import Bags
from gpuemb.io.batch import Batch
from gpuemb.io.errors import DataError, ShardError
from gpuemb.io.jagged import JaggedError
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.shards import ShardLayout, ShardSource, ShardWriter, WriteOptions

HOTNESS = (2, 0, 1, 0)  # a fixed feature of two keys, a jagged one, a single-hot one, another jagged one
LAYOUT = ShardLayout(("y",), ("row",), ("a", "b", "c", "d"), HOTNESS)


def make_rows(n, seed):
    """``n`` rows whose dense column is the row's index, so a batch says which rows it holds."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, (n, 2)).astype(np.int32)
    lengths[rng.random((n, 2)) < 0.1] = 0  # empty bags, which pool to zeros
    values = rng.integers(-(1 << 62), 1 << 62, int(lengths.sum()))
    return Batch(rng.random(n).astype(np.float32), np.arange(n, dtype=np.float32)[:, None],
                 rng.integers(0, 1 << 40, (n, 3)), Bags(lengths, values))


def write(folder, rows, chunk_rows=64, rows_per_shard=256, pieces=(0.3, 0.75)):
    writer = ShardWriter(folder, LAYOUT, WriteOptions(chunk_rows=chunk_rows, rows_per_shard=rows_per_shard))
    cuts = [0, *(int(p * rows.rows) for p in pieces), rows.rows]
    for a, b in zip(cuts, cuts[1:]):  # batches that do not line up with chunks
        writer.append(rows.slice(a, b))
    return writer.close()


def expected_features(rows, ids):
    """The feature-major (values, lengths [F, n]) of rows ``ids``, one bag at a time."""
    ends = rows.bags.row_ends()
    values, lengths = [], []
    for f, h in enumerate(HOTNESS):
        column, j = sum(HOTNESS[:f]), sum(1 for x in HOTNESS[:f] if x == 0)
        for r in ids:
            if h:
                bag = rows.sparse[r, column:column + h]
            else:
                start = ends[r] + rows.bags.lengths[r, :j].sum()
                bag = rows.bags.values[start:start + rows.bags.lengths[r, j]]
            values.extend(bag)
            lengths.append(len(bag))
    return np.array(values, np.int64), np.array(lengths).reshape(len(HOTNESS), -1)


def test_jagged_rows_come_back_as_written(tmp_path):
    rows = make_rows(1000, 1)
    paths = write(tmp_path, rows)
    assert len(paths) == 4
    with h5py.File(paths[0]) as f:
        assert f.attrs["version"] == 3 and f["checksums"].shape == (4, 5) and f["bag_starts"].shape == (5,)
    with ShardSource(tmp_path) as source:
        back = Batch.concat([source.read_block(i) for i in range(len(source.blocks))])
    for got, want in zip((*back.arrays(), back.bags.lengths, back.bags.values),
                         (*rows.arrays(), rows.bags.lengths, rows.bags.values)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_loader_yields_each_rows_bags_feature_major_and_resumes_exactly(tmp_path, world_size):
    rows = make_rows(900, 2)
    write(tmp_path, rows)
    seen = []
    with ShardSource(tmp_path) as source:
        for rank in range(world_size):
            config = LoaderConfig(batch_size=100, seed=5, shuffle_window=3, rank=rank, world_size=world_size,
                                  drop_last=False, prefetch=2)
            loader = Loader(source, config)
            batches = list(loader)
            for batch in batches:
                ids = batch.dense[:, 0].astype(np.int64)
                values, lengths = expected_features(rows, ids)
                np.testing.assert_array_equal(batch.sparse.values, values)
                np.testing.assert_array_equal(batch.sparse.lengths(), lengths)
                np.testing.assert_array_equal(batch.label, rows.label[ids])
                seen.append(ids)
            again = Loader(source, config)
            it = iter(again)
            for _ in range(3):
                next(it)
            state = again.state_dict()
            resumed = Loader(source, config)
            resumed.load_state_dict(state)
            rest = list(resumed)
            assert len(rest) == len(batches) - 3
            for a, b in zip(rest, batches[3:]):
                np.testing.assert_array_equal(a.sparse.values, b.sparse.values)
                np.testing.assert_array_equal(a.dense, b.dense)
    ids = np.concatenate(seen)
    assert ids.size == 900 and np.unique(ids).size == 900  # the ranks' parts are disjoint and cover every row
    assert not np.array_equal(ids, np.arange(900))  # shuffled


def test_evaluations_padding_repeats_the_last_rows_bags_too(tmp_path):
    """The eval loader's last batch, 2 rows on 3 ranks, padded with the last row (``pad_to``): the padding's
    jagged bags are that row's."""
    rows = make_rows(302, 3)
    write(tmp_path, rows)
    with ShardSource(tmp_path) as source:
        for rank in range(3):
            config = LoaderConfig(batch_size=100, shuffle=False, drop_last=False, pad_to=3, rank=rank, world_size=3)
            last = list(Loader(source, config))[-1]
            ids = last.dense[:, 0].astype(np.int64)
            assert list(ids) == [[300], [301], [301]][rank]
            values, lengths = expected_features(rows, ids)
            np.testing.assert_array_equal(last.sparse.values, values)
            np.testing.assert_array_equal(last.sparse.lengths(), lengths)


def test_a_bag_over_the_loaders_cap_names_the_feature_and_row(tmp_path):
    rows = make_rows(200, 3)
    write(tmp_path, rows)
    with ShardSource(tmp_path) as source:
        with pytest.raises(JaggedError, match=r"feature '[bd]', row \d+: more than max_bag=4 keys"):
            list(Loader(source, LoaderConfig(batch_size=50, max_bag=4)))


def test_a_negative_length_is_refused_when_written_naming_feature_and_row(tmp_path):
    rows = make_rows(100, 4)
    rows.bags.lengths[17, 1] = -1
    rows.bags.lengths[17, 0] += 1  # the total still matches the values
    with pytest.raises(DataError, match=r"feature 'd', row 17: a negative length"):
        write(tmp_path, rows, pieces=())


def test_lengths_that_do_not_add_up_to_the_values_are_refused(tmp_path):
    rows = make_rows(100, 5)
    bad = Batch(*rows.arrays(), Bags(rows.bags.lengths, rows.bags.values[:-1]))
    with pytest.raises(DataError, match="add up to .* keys but there are .* values"):
        write(tmp_path, bad, pieces=())


def test_a_batch_without_the_layouts_bags_is_refused(tmp_path):
    rows = make_rows(10, 6)
    with pytest.raises(DataError, match="0 jagged features for shards of 2"):
        write(tmp_path, Batch(*rows.arrays()), pieces=())


@pytest.mark.parametrize("dataset, where", [("bag_values", 500), ("bag_lengths", (40, 1))])
def test_a_flipped_jagged_byte_is_named_with_its_chunk(tmp_path, dataset, where):
    rows = make_rows(300, 7)
    path = write(tmp_path, rows, rows_per_shard=320)[0]
    with h5py.File(path, "r+") as f:
        f[dataset][where] ^= 1 << 3
    with ShardSource(path) as source, pytest.raises(ShardError, match=f"dataset '{dataset}', chunk \\d"):
        for i in range(len(source.blocks)):
            source.read_block(i)


def test_starts_that_do_not_fit_the_values_are_a_shard_error(tmp_path):
    path = write(tmp_path, make_rows(300, 8), rows_per_shard=320)[0]
    with h5py.File(path, "r+") as f:
        f["bag_starts"][-1] += 1
    with pytest.raises(ShardError, match="'bag_starts' and 'bag_values' .* do not fit"):
        ShardSource(path)
