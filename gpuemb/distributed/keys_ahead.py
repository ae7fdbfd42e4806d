"""The next batch's key exchange, started during this step: the first part of a sharded lookup, moved ahead.

A sharded lookup begins by sending each key to its owner (``exchange.py``, step 1: two all-to-alls, the per-stream
counts and the keys). They depend on the batch's keys and the plan alone, not on any row, so on an overlapped
communicator (``comm/overlap.py``) the training loop starts them for batch i+1 once step i's backward has started
its own collectives (``ShardedEmbeddingCollection.route_ahead``), and they travel while step i runs its dense step
and its row updates. Step i+1's forward then takes them (``take``) instead of exchanging. The same keys go the same
way in the same order, so the lookups, and every bit after them, are those of the blocking run.

Every rank starts them at the same point of its step, and the next training forward of every rank takes them:
that keeps the collectives in the same order on every rank. A forward that gets other keys than those routed is a
bug of the caller's, and an error, not a silent second exchange that would pair with another rank's next
collective.
"""
import numpy as np

from .routing import Route


class KeysAhead:
    """The key exchange of ``keys [B, F]`` (mixed, int64, read from ``source``, the batch's array) for
    ``collection``, started on its communicator."""

    def __init__(self, collection, source, keys):
        c, W = collection, collection.comm.world_size
        self.source, self.keys = source, keys
        self.route = r = Route(keys, c.table_of, c.streams, c.groups, W)
        self._counts = c.comm.start("alltoallv", r.stream_counts, np.ones(W, np.int64), "a2a_keys")
        self._received = c.comm.start("alltoallv", r.keys, r.send_counts, "a2a_keys")

    def matches(self, keys):
        return keys.shape == self.keys.shape and np.array_equal(keys, self.keys)

    def take(self):
        """``(route, counts [W, S] received, keys received)``, once both exchanges are done."""
        return self.route, self._counts.wait()[0], self._received.wait()[0]
