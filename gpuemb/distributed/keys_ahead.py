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

Bags to pool (``pooled_exchange.py``) go the same way: ``BagKeys`` sends each owner its sub-bags' lengths, keys
and per-key weights (and each relay its recipes) with the per-stream counts, started ahead on an overlapped
communicator and done in the forward elsewhere. The weights ride in the keys' block (``bag_routing.pack_weights``),
so the forward exchanges nothing before the rows.
"""
import numpy as np

from .bag_routing import BagRoute, interleave, pack, pack_weights
from .bags import LocalBags
from .exchange import _Received
from .routing import Route


class KeysAhead:
    """The key exchange of ``keys [B, F]`` (mixed, int64, read from ``source``, the batch's array) for
    ``collection``, started on its communicator."""

    def __init__(self, collection, source, keys):
        c, W = collection, collection.comm.world_size
        self.source, self.mine = source, keys
        self.route = r = Route(keys, c.table_of, c.streams, c.groups, W, c.dedup)
        self._counts = c.comm.start("alltoallv", r.stream_counts, np.ones(W, np.int64), "a2a_keys")
        self._received = c.comm.start("alltoallv", r.keys, r.send_counts, "a2a_keys")

    def matches(self, keys):
        return isinstance(keys, np.ndarray) and keys.shape == self.mine.shape and np.array_equal(keys, self.mine)

    def take(self):
        """``(route, counts [W, S] received, keys received)``, once both exchanges are done."""
        return self.route, self._counts.wait()[0], self._received.wait()[0]


class BagKeys:
    """The key exchange of the ``LocalBags`` ``bags`` for ``collection``: started on its overlapped communicator
    where ``ahead``, else done now. ``take()`` gives what ``ShardedPooledLookup`` goes on with."""

    def __init__(self, collection, bags, ahead=False, source=None):
        c, comm, W = collection, collection.comm, collection.comm.world_size
        self.mine, self.source = bags, source
        self.route = r = BagRoute(bags, c.table_of, c.streams, c.groups, W)
        # each rank says whether its blocks end with weights, so that an owner can tell them from the keys
        head = [r.stream_counts, np.full((W, 1), int(bags.weights is not None))]
        send, send_counts = pack(r.lengths, r.keys, r.send_counts, r.key_counts), r.send_counts + r.key_counts
        if bags.weights is not None:  # each peer's keys' weights follow its keys, in the same block
            words, sizes = pack_weights(r.weights, r.key_counts)
            send = interleave(send, send_counts, words, sizes)
            send_counts = send_counts + sizes
        self.places = None
        if c.relay:  # each relay on another host gets the recipe of this rank's sub-bags there
            F, B = bags.lengths.shape
            self.places = c.relay.places(r, B * F)
            recipe, sizes = c.relay.recipes(r, self.places)
            head.append(sizes[:, None])
            send = interleave(send, send_counts, recipe, sizes)
            send_counts = send_counts + sizes
        exchange = comm.start if ahead else lambda op, *args: _Received(getattr(comm, op)(*args))
        self._head = exchange("alltoallv", np.concatenate(head, axis=1), np.ones(W, np.int64), "a2a_keys")
        self._payload = exchange("alltoallv", send, send_counts, "a2a_keys")

    def matches(self, bags):
        a, b = self.mine, bags
        if not (isinstance(b, LocalBags) and a.lengths.shape == b.lengths.shape):
            return False
        return np.array_equal(a.lengths, b.lengths) and np.array_equal(a.values, b.values) and \
            (a.weights is None) == (b.weights is None) and (a.weights is None or np.array_equal(a.weights, b.weights))

    def take(self):
        """``(counts [W, S + 1 (+1 relayed)] received, payload, its counts [W])``, once both are done."""
        return self._head.wait()[0], *self._payload.wait()
