"""The two-level exchange of keyed partials (``gpuemb/distributed/host_relay.py``): its bookkeeping on one process,
and under ``mpiexec -n 4`` declared as 2 hosts of 2 (workers/host_relay.py), table-row-wise, grid, row-wise and mixed
bags against the single-level exchange on the same plan, blocking and overlapped, with the bytes between hosts counted
by hand; and the grid's by sum on the emulated device, its NCCL included."""
import numpy as np
import pytest

from gpuemb.autograd import backend
from gpuemb.distributed.host_relay import HostRelay
from gpuemb.distributed.hosts import LOCAL_RANKS_ENV
from gpuemb.distributed.routing import Stream
from gpuemb.sharding.hierarchical import plan_hosts, relay_hosts
from gpuemb.sharding.spec import TableSpec

SPECS = [TableSpec("a", 1000, 8), TableSpec("b", 4000, 8)]


def test_a_plan_relays_only_over_several_hosts_of_several_ranks():
    assert relay_hosts(plan_hosts(SPECS, 4, 2, "table_row").local_ranks, 4) == 2
    assert relay_hosts(plan_hosts(SPECS, 4, 4, "table_row").local_ranks, 4) is None  # one host: nothing crosses
    assert relay_hosts(plan_hosts(SPECS, 4, 1, "table_row").local_ranks, 4) is None  # a rank a host: nothing to combine


def test_a_keyed_partial_goes_to_the_rank_of_its_requesters_local_rank_on_the_owners_host(rng):
    streams = [Stream(0, "table_row", (0, 8), -1, (2, 3)), Stream(1, "table", (0, 8), 1, (1,))]
    relay = HostRelay(2, 2, 4, streams, [(8, [0, 1])])
    np.testing.assert_array_equal(relay.relay(np.arange(4), 2), [2, 3, 2, 3])
    # rank 2 owns stream 0's even residue: what it got from each peer, reordered for stage 1
    counts = np.array([[2, 0], [1, 0], [3, 0], [1, 0]])
    order, sent = relay.stage1_order(counts, [0, 1])
    np.testing.assert_array_equal(sent, [0, 0, 5, 2])  # ranks 0 and 2 by way of 2, ranks 1 and 3 by way of 3
    np.testing.assert_array_equal(order, [0, 1, 3, 4, 5, 2, 6])


@pytest.mark.slow
def test_four_ranks_as_two_hosts_relay_partials_with_the_single_level_bits_and_fewer_bytes_between_hosts(rng,
                                                                                                          mpiexec):
    mpiexec(4, "host_relay.py", rng.integers(1 << 30), timeout_s=300, **{LOCAL_RANKS_ENV: "2"})


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="4 ranks on the emulated device; on a GPU, NCCL wants a GPU a rank")
def test_the_relay_on_the_emulated_device(rng, mpiexec):
    mpiexec(4, "host_relay.py", rng.integers(1 << 30), "small", timeout_s=600, GPUEMB_DEVICE="emulated",
            NUMBA_ENABLE_CUDASIM="1", **{LOCAL_RANKS_ENV: "2"})
