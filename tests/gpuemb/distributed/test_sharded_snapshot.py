"""Sharded snapshots in a world of one: a round trip, and the errors that must leave every table empty. The
mpiexec tests reshard between 1 and 2 ranks."""
import h5py
import numpy as np
import pytest

from gpuemb import comm, optim
from gpuemb.autograd import no_grad
from gpuemb.distributed import ShardedEmbeddingCollection, load_sharded, load_sharded_tables, save_sharded, shard_path
from gpuemb.sharding import Placement, Plan, RankBudget, Shard, TableSpec
from gpuemb.store.options import TableConfig
from gpuemb.store.snapshot import VERSION, SnapshotError, save_snapshot
from gpuemb.store.snapshot.seal import seal
from gpuemb.store.table import EmbeddingTable

D = 4
CONFIGS = [TableConfig(n, D, rule=optim.AdamRule(), lr=0.1) for n in ("a", "b")]
PLAN = Plan((RankBudget(1 << 30),), tuple(Placement(TableSpec.from_config(c, 50), k, (Shard(0, 50, (0, D)),))
                                          for c, k in zip(CONFIGS, ("table", "data"))), 64, "fp32")


def collection(configs=CONFIGS):
    return ShardedEmbeddingCollection(configs, comm.LocalCommunicator(), PLAN)


def rows_of(c):
    return {n: [np.concatenate(x) for x in zip(*s.table.export())] for n, s in c.shards.items()}


@pytest.fixture
def saved(rng, tmp_path):
    c = collection()
    for _ in range(2):
        c(rng.integers(0, 40, (6, 2))).backward(rng.standard_normal((6, 2, D)).astype(np.float32))
    path = save_sharded(c, tmp_path / "emb")
    assert path == shard_path(tmp_path / "emb", 0, 1) and path.endswith("emb.rank0-of-1.h5")
    return c, path


def test_a_round_trip_gives_back_every_row(saved):
    c, path = saved
    fresh = collection()
    load_sharded(fresh, [path])
    assert_same_rows(rows_of(c), rows_of(fresh))


def assert_same_rows(want, got):
    for (n, w), g in zip(want.items(), got.values()):
        for a, b in zip(w, g):
            np.testing.assert_array_equal(np.sort(b, axis=0), np.sort(a, axis=0), err_msg=n)


def test_a_snapshot_of_whole_tables_loads_as_a_save_of_one_rank(saved, tmp_path):
    c, _ = saved
    plain = tmp_path / "plain.h5"  # what one process's checkpoint holds: no "sharded" meta
    save_snapshot({n: s.table for n, s in c.shards.items()}, plain)
    fresh = collection()
    load_sharded(fresh, [plain])
    assert_same_rows(rows_of(c), rows_of(fresh))


def test_a_sharded_save_loads_into_whole_tables_of_one_process(saved):
    c, path = saved
    tables = {cfg.name: EmbeddingTable(cfg) for cfg in CONFIGS}
    load_sharded_tables(tables, [path])
    got = {n: [np.concatenate(x) for x in zip(*t.export())] for n, t in tables.items()}
    assert_same_rows(rows_of(c), got)


def test_a_save_that_fails_raises_its_own_error(saved, tmp_path):
    c, _ = saved

    def refuse(name, table):
        raise ValueError(f"table {name!r} refused")

    with pytest.raises(ValueError, match="table 'a' refused"):
        save_sharded(c, tmp_path / "refused", wrap=refuse)


@pytest.mark.parametrize("resealed, message", [(False, "the CRC32 of its .* bytes after the seal"),
                                               (True, "table 'b', chunk 0 .*the rows checksum")])
def test_a_corrupt_chunk_loads_nothing(saved, resealed, message):
    _, path = saved
    with h5py.File(path) as f:
        info = f["tables/b/rows"].id.get_chunk_info(0)  # the last table: "a" would load first, unchecked
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + 3)
        fh.write(b"\xff\xff")
    if resealed:  # so that the chunk's own checksum is what catches it
        seal(path, VERSION)
    fresh = collection()
    with pytest.raises(SnapshotError, match=message):
        load_sharded(fresh, [path])
    assert [len(t) for t in fresh.tables] == [0, 0]


def test_missing_or_mismatched_files_are_named(saved, tmp_path):
    c, path = saved
    with pytest.raises(SnapshotError, match="no such snapshot file"):
        load_sharded(collection(), [tmp_path / "nothing.h5"])
    other = save_sharded(c, tmp_path / "other")
    with pytest.raises(SnapshotError, match="not the 1 files of one save"):
        load_sharded(collection(), [path, other])
    with pytest.raises(SnapshotError, match="saved with another config: lr is 0.1 there and 0.5 here"):
        load_sharded(collection([TableConfig(n, D, rule=optim.AdamRule(), lr=0.5) for n in ("a", "b")]), [path])
    used = collection()
    with no_grad():
        used(np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match="table 'a' already holds 1 keys"):
        load_sharded(used, [path])
