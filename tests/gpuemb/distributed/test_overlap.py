"""The dense allreduce overlapped with the backward, under ``mpiexec`` over MPI (workers/overlap.py): the blocking
run's bits on 2 and 4 ranks, its buckets started during the backward and waited for after it."""
import pytest


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_overlapped_allreduce_gives_the_blocking_bits(ranks, rng, mpiexec):
    mpiexec(ranks, "overlap.py", rng.integers(1 << 30))
