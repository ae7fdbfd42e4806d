"""How many ranks share a host, for the placements that keep a table's rows on one host (``table_row``, ``grid``).

A declared layout comes first: ``GPUEMB_LOCAL_RANKS=L`` in every rank's environment makes hosts of ``L`` ranks
whatever machines the ranks are on, so one machine runs 4 ranks as 2 hosts of 2 (tests, or a layout chosen by
hand). Otherwise the launcher's placement: each rank's index on its host (``Communicator.local_rank``), gathered.
The hosts must then hold ranks ``[h·L, (h + 1)·L)``, as mpiexec's default block placement fills them.
"""
import os

import numpy as np

from gpuemb.sharding.hierarchical import check_hosts

LOCAL_RANKS_ENV = "GPUEMB_LOCAL_RANKS"


def local_ranks(comm):
    """The ranks of a host under ``comm`` (every rank must call it: it gathers the ranks' places)."""
    declared = os.environ.get(LOCAL_RANKS_ENV)
    if declared is not None:
        if not declared.isdigit():
            raise ValueError(f"{LOCAL_RANKS_ENV}={declared!r}: give the ranks of one host, a divisor of the "
                             f"{comm.world_size} ranks")
        check_hosts(comm.world_size, int(declared), LOCAL_RANKS_ENV)
        return int(declared)
    places = comm.allgather(np.array([comm.local_rank], np.int64), tag="hosts")
    L = int(places.max()) + 1
    if comm.world_size % L or (places != np.arange(comm.world_size) % L).any():
        raise ValueError(f"the launcher placed the {comm.world_size} ranks on hosts as local ranks "
                         f"{places.tolist()}, not hosts of equal size filled rank by rank; launch with block "
                         f"placement, or declare the ranks of a host in {LOCAL_RANKS_ENV}")
    return L
