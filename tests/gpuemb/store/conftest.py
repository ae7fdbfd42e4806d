"""Fixtures of the store's tests: a rank of a row-wise sharded collection, as ``load_sharded`` sees one."""
import pytest

from gpuemb.comm import LocalCommunicator
from gpuemb.distributed.shards import LocalShard
from gpuemb.sharding.plan import owner_hash


class Rank:
    """Rank ``rank`` of ``world`` holding table ``t`` (named "t") row-wise, keys going by ``owner_hash % world``."""

    def __init__(self, rank, world, t):
        self.comm = LocalCommunicator()
        self.comm.rank = rank
        self.plan = self
        self.world = world
        self.shards = {"t": LocalShard("t", "row", (0, t.dim), t)}

    def owner_of(self, name, keys):
        return owner_hash(keys) % self.world


@pytest.fixture
def row_rank():
    """The ``Rank`` class: ``row_rank(rank, world, table)``."""
    return Rank
