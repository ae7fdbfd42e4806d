"""Joining a sharded delta's rank files (``delta_join.py``), on files written here: row shards by union, column
shards side by side key by key; files that do not fit together are one BundleError line each."""
import numpy as np
import pytest

from gpuemb.optim import AdagradRule
from gpuemb.serve import BundleError
from gpuemb.serve.delta_join import join_tables
from gpuemb.store.options import Initializer, TableConfig
from gpuemb.store.snapshot import read_snapshot, save_delta
from gpuemb.store.table import EmbeddingTable


def _shard(tmp_path, rank, kind, cols, keys, rng, world_size=2):
    """Rank ``rank``'s delta file of table "t" (whole dim 4) holding ``keys`` with random weights in ``cols``."""
    width = cols[1] - cols[0]
    t = EmbeddingTable(TableConfig("t", width, initializer=Initializer("normal", 0.5, seed=1), rule=AdagradRule(),
                                   lr=0.1, track_updates=True))
    since = t.marker()
    rows = np.zeros((keys.size, t.home.tier.width), np.float32)
    rows[:, :width] = rng.normal(size=(keys.size, width))
    t.import_rows(keys, rows, np.ones(keys.size, np.int32))
    path = tmp_path / f"r{rank}.h5"
    save_delta({"t": t}, path, since, {"sharded": {"rank": rank, "world_size": world_size, "shards": {
        "t": {"kind": kind, "cols": list(cols), "dim": 4}}}})
    return read_snapshot(path), keys, rows[:, :width]


def test_row_shards_join_by_union_and_column_shards_side_by_side(tmp_path, rng):
    (a, ka, wa), (b, kb, wb) = _shard(tmp_path, 0, "row", (0, 4), np.array([1, 5]), rng), \
        _shard(tmp_path, 1, "row", (0, 4), np.array([2, 9, 4]), rng)
    keys, weights, deleted = join_tables([a, b], {"t": 4})["t"]
    order = np.argsort(np.concatenate([ka, kb]))
    np.testing.assert_array_equal(np.sort(keys), np.concatenate([ka, kb])[order])
    np.testing.assert_array_equal(weights[np.argsort(keys)], np.concatenate([wa, wb])[order])
    assert deleted.size == 0
    same = np.array([3, 7, 8])
    (a, _, wa), (b, _, wb) = _shard(tmp_path, 0, "column", (0, 1), same, rng), \
        _shard(tmp_path, 1, "column", (1, 4), same, rng)
    keys, weights, _ = join_tables([a, b], {"t": 4})["t"]
    np.testing.assert_array_equal(keys, same)
    np.testing.assert_array_equal(weights, np.concatenate([wa, wb], axis=1))


@pytest.mark.parametrize("case, says", [
    ("other keys", "changed other keys than the shard [0, 2]"),
    ("a gap", "not the columns [0, 4) once"),
    ("swapped", "but the index lists it as rank 0 of 2"),
    ("dim", "has dim 4, the bundle's 8"),
])
def test_rank_files_that_do_not_fit_together_are_refused_in_one_line(case, says, tmp_path, rng):
    keys = np.array([3, 7])
    a = _shard(tmp_path, 0, "column", (0, 2), keys, rng)[0]
    b = _shard(tmp_path, 1, "column", (3 if case == "a gap" else 2, 4),
               np.array([3, 8]) if case == "other keys" else keys, rng)[0]
    with pytest.raises(BundleError) as e:
        join_tables([b, a] if case == "swapped" else [a, b], {"t": 8 if case == "dim" else 4})
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("kind", ["table_row", "grid"])
def test_two_d_shards_join_by_rows_within_a_column_range_then_side_by_side(kind, tmp_path, rng):
    """A table-row-wise table is one range over a host's ranks; a grid's column ranges are each over a host's."""
    keys = np.array([2, 3, 7, 8, 11])
    owner = np.array([0, 1, 1, 0, 1])  # the row shard of each key within its range
    ranges = [(0, 4)] if kind == "table_row" else [(0, 1), (1, 4)]
    files, want = [], []
    for c, cols in enumerate(ranges):
        got = [_shard(tmp_path / f"{c}{r}", 2 * c + r, kind, cols, keys[owner == r], rng, 2 * len(ranges))
               for r in (0, 1) for _ in [(tmp_path / f"{c}{r}").mkdir()]]
        files += [g[0] for g in got]
        both = np.concatenate([g[1] for g in got])
        want.append(np.concatenate([g[2] for g in got])[np.argsort(both)])
    joined, weights, deleted = join_tables(files, {"t": 4})["t"]
    np.testing.assert_array_equal(joined, np.sort(keys))
    np.testing.assert_array_equal(weights, np.concatenate(want, axis=1))
    assert deleted.size == 0
