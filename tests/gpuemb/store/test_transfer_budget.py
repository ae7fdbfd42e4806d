"""The store's share of a step's host-device crossings, counted by the emulated device (autograd/transfers.py).

A device table's lookup, backward and row update cross nothing once its levels have room; a table with a device
cache over a host home moves, per step and level, the missed keys down and their rows up, plus the dirty rows it
evicts down and, once the cache is full, one small read of its counts to decide what to evict (level.py). Each
read back waits for the stream (a copy to pageable memory returns when it is done), and nothing else waits.
"""
import numpy as np
import pytest

from gpuemb.autograd import Tensor, backend, transfers
from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

pytestmark = pytest.mark.gpu

D, BATCH, STEPS, TABLES = 4, 64, 4, 3


def steps_counted(tables, rng):
    """Each step's counts inside the store: the batch's upload and the gradient's are made before counting."""
    counts = []
    for _ in range(STEPS):
        inputs = [(backend.to_device(rng.integers(0, 300, BATCH)),
                   backend.to_device(rng.standard_normal((BATCH, D)).astype(np.float32))) for _ in tables]
        before = transfers.COUNTS.snapshot()
        for table, (keys, gy) in zip(tables, inputs):
            (table.lookup(keys) * Tensor(gy)).sum().backward()
        counts.append(transfers.COUNTS.since(before))
    return counts


def make(options, seed):
    return EmbeddingTable(TableConfig(f"t{seed}", D, rule=RowwiseAdagradRule(), lr=0.1, options=options,
                                      initializer=Initializer("normal", 0.5, seed=seed)))


def test_device_tables_cross_nothing(rng):
    tables = [make(StoreOptions(slab_rows=1024), seed) for seed in range(TABLES)]
    steps_counted(tables, rng)  # the first batches size the tiers and the index: a read each, then room
    for counts in steps_counted(tables, rng):
        assert counts == dict.fromkeys(transfers.FIELDS, 0), counts


def test_a_cached_table_moves_its_misses_once_each_way(rng):
    tables = [make(StoreOptions("host", cache_rows=128, slab_rows=128), seed) for seed in range(TABLES)]
    steps_counted(tables, rng)
    for counts in steps_counted(tables, rng):
        # per table: missed keys down, rows up; evicted dirty rows down and the full cache's counts read
        assert counts["to_device"] <= TABLES and counts["to_host"] <= 3 * TABLES, counts
        assert counts["syncs"] == counts["to_host"], counts
        assert counts["to_device"] >= 1  # misses happen over a key space twice the cache
