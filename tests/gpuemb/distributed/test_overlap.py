"""The dense allreduce overlapped with the backward, under ``mpiexec`` over MPI (workers/overlap.py): the blocking
run's bits on 2 and 4 ranks, its buckets started during the backward and waited for after it; a sharded DLRM with
every overlap on (workers/overlap_steps.py); fp16's loss-scaled step, its buckets started in its backward and a
step whose rows overflowed on one rank skipped on every rank (workers/overlap_scaled.py); --deterministic's slice
gradients gathered in buckets from the last slice's backward (workers/overlap_slices.py); and a rank that fails
while the gradients' all-to-all is in flight (workers/overlap_dies.py)."""
import pytest

from .conftest import WORKERS


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_overlapped_allreduce_gives_the_blocking_bits(ranks, rng, mpiexec):
    mpiexec(ranks, "overlap.py", rng.integers(1 << 30))


@pytest.mark.parametrize("kind, ranks, features", [("row", 2, "keys"), ("table", 2, "keys"), ("column", 2, "keys"),
                                                   ("row", 4, "keys"), ("row", 2, "bags"), ("table", 4, "bags")])
def test_a_sharded_dlrm_with_every_overlap_on_trains_the_blocking_bits(kind, ranks, features, rng, mpiexec):
    mpiexec(ranks, "overlap_steps.py", kind, rng.integers(1 << 30), features)


@pytest.mark.parametrize("kind, ranks", [("row", 2), ("table", 2), ("row", 4)])
def test_the_overlapped_loss_scaled_step_trains_the_blocking_bits_and_skips_an_overflow_everywhere(kind, ranks, rng,
                                                                                                  mpiexec):
    mpiexec(ranks, "overlap_scaled.py", kind, rng.integers(1 << 30))


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_slices_gradients_gathered_during_the_last_slice_are_one_processs_bits(ranks, rng, mpiexec):
    mpiexec(ranks, "overlap_slices.py", rng.integers(1 << 30))


@pytest.mark.parametrize("mode, says", [
    ("raise", "rank 1 of 2: uncaught RuntimeError: planted failure in the backward; aborting every rank"),
    # the first collective of the backward that rank 1 never joins: the top MLP's bucket, which starts before the
    # gradients' all-to-all (the top's backward comes first)
    ("hang", "rank 0 of 2: allreduce did not complete within 8 s"),
])
def test_a_rank_that_fails_during_the_overlapped_gradient_exchange_ends_the_job_in_one_line(mode, says, mpi_run):
    # rank 1 sleeps 120 s, past the 60 s limit (which fails the test): only the 8 s comm timeout may end the hang
    done = mpi_run(2, WORKERS / "overlap_dies.py", mode, timeout_s=60, GPUEMB_COMM_TIMEOUT="8")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "passed" not in output, output
    assert says in output, output
