"""The dense allreduce overlapped with the backward, under ``mpiexec`` over MPI (workers/overlap.py): the blocking
run's bits on 2 and 4 ranks, its buckets started during the backward and waited for after it."""
import pytest


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_overlapped_allreduce_gives_the_blocking_bits(ranks, rng, mpiexec):
    mpiexec(ranks, "overlap.py", rng.integers(1 << 30))


@pytest.mark.parametrize("kind, ranks", [("row", 2), ("table", 2), ("column", 2), ("row", 4)])
def test_a_sharded_dlrm_with_every_overlap_on_trains_the_blocking_bits(kind, ranks, rng, mpiexec):
    mpiexec(ranks, "overlap_steps.py", kind, rng.integers(1 << 30))
