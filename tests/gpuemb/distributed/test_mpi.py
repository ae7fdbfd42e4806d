"""The sharded collection under a real ``mpiexec`` on the CPU: a DLRM on W ranks, each on its part of a global
batch, trains like one process on the whole batch (table-, row- and column-wise plans, each with a
data-parallel table); int8 all-to-alls stay within the codec's bound; snapshots reshard between 1 and 2 ranks.
The workers in workers/ check against the one-process reference they compute themselves (``mpiexec``:
conftest.py)."""
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["table", "row", "column"])
def test_two_ranks_train_like_one_process_on_the_global_batch(kind, rng, mpiexec):
    mpiexec(2, "equivalence.py", kind, rng.integers(1 << 30))


def test_float16_rows_shard_by_columns_too(rng, mpiexec):
    mpiexec(2, "equivalence.py", "column", rng.integers(1 << 30), DIST_TEST_DTYPE="float16")


def test_four_ranks_train_like_one_process_row_wise(rng, mpiexec):
    mpiexec(4, "equivalence.py", "row", rng.integers(1 << 30))


def test_int8_all_to_alls_stay_within_the_codec_bound_both_ways(rng, mpiexec):
    mpiexec(2, "int8.py", rng.integers(1 << 30))


@pytest.mark.parametrize("saved, loaded", [
    ((2, "column,row,column,data"), (1, "table,table,row,data")),   # N=2 -> M=1: column shards joined
    ((1, "table,table,table,data"), (2, "row,column,column,data")),  # N=1 -> M=2: split by key and by column
])
def test_a_snapshot_of_n_ranks_loads_into_m_resharded_by_key(saved, loaded, tmp_path, rng, mpiexec):
    seed, prefix = rng.integers(1 << 30), tmp_path / "emb"
    mpiexec(saved[0], "sharded_snapshot.py", "save", saved[1], seed, prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"emb.rank{r}-of-{saved[0]}.h5" for r in range(saved[0])]
    mpiexec(loaded[0], "sharded_snapshot.py", "load", loaded[1], seed, prefix, saved[0])
