"""The mpi backend over a modelled link under a real ``mpiexec``: workers/modelled.py checks on every rank that
results are the backend's and each collective's modelled time is its algorithm's messages and bytes."""
import re

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_over_a_modelled_link_are_the_backends_and_take_the_links_time(n, rng, mpiexec):
    rc, output = mpiexec(n, "modelled.py", rng.integers(1 << 30))
    assert rc == 0, output
    assert sorted(map(int, re.findall(r"rank (\d+): ok", output))) == list(range(n)), output


def test_an_alltoallv_over_hosts_splits_its_peers_as_the_estimate_does(rng, mpiexec):
    rc, output = mpiexec(4, "modelled.py", rng.integers(1 << 30), "hosts", GPUEMB_LOCAL_RANKS="2")
    assert rc == 0, output
    assert sorted(map(int, re.findall(r"rank (\d+): ok", output))) == list(range(4)), output
