"""One step of the sharded lookup of pooled features: bags out, pooled rows back, gradients out, updates applied.

The steps of ``ShardedLookup`` (exchange.py), with bags in place of keys (``bag_routing.py``):

- Table- and column-wise: each bag goes whole to its owner, which pools it in its one lookup of the step (by the
  collection's mode: sum, weighted sum, mean or max; a column shard pools its own columns), and sends back one
  row a bag. The backward sends one gradient row a bag, and the lookup's backward routes it as in one process.
- Row-wise: each requester sends each owner only the sub-bags of the keys that owner holds (none for a bag it holds
  no key of), each owner pools its sub-bags (sum, weighted sum, or max; a mean's sub-bags are summed) and sends
  back one partial row a sub-bag, and the requester combines a bag's partials (``row_partials.py``): their sum
  (over the whole bag's length for a mean), or their element-wise max. So a requester and an owner exchange a row
  for each bag with a key in the owner's shard, what the planner's cost model counts. The backward sends each
  owner the gradient of each sub-bag it pooled (over the bag's length for a mean; for max, only the elements its
  partial won, zeros elsewhere), and the owner's lookup spreads it over its sub-bag. Table-row-wise is row-wise
  over one host's ranks; a grid's column ranges are each row-wise over one host's ranks, so each range's partials
  combine into its own columns.
- Data-parallel: each replica pools its rank's bags; the backward gathers every rank's bags and gradients and
  every replica applies them, as for single keys.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, to_device

from .bag_routing import ArrivedBags, split_tails
from .exchange import ShardedLookup, _Received
from .keys_ahead import BagKeys
from .routing import Arrivals
from .row_partials import RowPartials


class ShardedPooledLookup(ShardedLookup):
    """``ShardedPooledLookup(collection, bags, training).apply(anchor)``: ``[B, F, D]`` float32, the ``LocalBags``
    ``bags`` pooled by the collection's mode."""

    def __init__(self, collection, bags, training, routed=None):
        self.c, self.bags, self.training, self.routed = collection, bags, training, routed
        self.F, self.B = bags.lengths.shape
        self.mode = collection.mode
        self.partials = {}  # group: the RowPartials of its row-wise streams
        self.groups = collection.groups
        self.relay = collection.relay  # keyed partials combine within a host first (host_relay.py), or None
        self.relayed = {}  # group: the relay's stage-1 order, what it gathered, its RowPartials and counts

    def _look_up(self):
        c, comm = self.c, self.c.comm
        S = len(c.streams)
        sent = self.routed or BagKeys(c, self.bags)  # started during the last step (keys_ahead.py), or now
        self.route = r = sent.route
        self.places = sent.places
        counts, payload, recv_counts = sent.take()
        if self.relay:
            payload, recipe = split_tails(payload, recv_counts, counts[:, S + 1])
            recv_counts = recv_counts - counts[:, S + 1]
            self.recipes = self.relay.received(recipe, counts[:, S + 1])
        arrived = ArrivedBags(payload, recv_counts, counts[:, :S].sum(axis=1), counts[:, S] > 0)
        self.counts = counts[:, :S]
        self.arrivals = a = Arrivals(self.counts, self.groups)
        for s in c.local_streams:
            keys, offsets, w = arrived.bags(a.index[s])
            if keys.size:
                self.owned[s] = c.shard_of(s).table.lookup(keys, offsets, self._owner_mode(s), self.training, w)

    def _outgoing(self, xp, g, width, ids):
        reply, counts = super()._outgoing(xp, g, width, ids)
        if self.relay is None or g not in self.relay.groups:
            return reply, counts
        order, counts = self.relay.stage1_order(self.counts, ids)  # keyed partials to their relays
        self.relayed[g] = {"order": order}
        return reply[to_device(order)], counts

    def _started(self, out, started):
        """On an overlapped communicator a relayed group's stage 1 (within the host) is waited for here, and its
        stage 2 (between hosts: the slower link, and the second message of a bag) started, so that it is stage 2
        that travels while the model computes up to the output's first read (DLRM's bottom MLP)."""
        ahead = []
        for g, ids, pending in started:
            if g in self.relayed:
                pending = self._relay_send(out, g, ids, pending.wait()[0], start=True)
            ahead.append((g, ids, pending))
        return ahead

    def _place_group(self, out, g, ids, rows):
        """Table- and column-wise rows go in place; the keyed streams' partials combine into their bags' rows."""
        if g in self.relayed:
            if "to" not in self.relayed[g]:  # blocking: stage 1's rows, so both stages now ("to": stage 2 sent)
                rows = self._relay_send(out, g, ids, rows, start=False).wait()[0]
            return self._relay_receive(out, g, rows)
        others, row = self._split(g, ids)
        super()._place_group(out, g, others, rows)
        if row.size:  # a bag's partials of one column range combine: its place is offset by the range's start
            entries = self.route.group_index[g][row]
            start = np.array([st.cols[0] for st in self.c.streams], np.int64)[self.route.stream[entries]]
            self._combine(out, g, start * (self.B * self.F) + self.route.pos[entries], self.route.lengths[entries],
                          rows[to_device(row)])

    def _combine(self, out, g, place, lengths, rows):
        """The bags' rows from their partials ``rows`` (of bags at ``place``, sub-bags of ``lengths``), in place."""
        self.partials[g] = p = RowPartials(place, lengths)
        if not place.size:
            return
        pooled = p.combine(rows, self.mode)
        for bags, pos, a in self._by_columns(p.bags):
            out[to_device(pos), a:a + rows.shape[1]] = pooled if bags is None else pooled[to_device(bags)]

    def _relay_send(self, out, g, ids, rows, start):
        """Stage 1 has brought this rank, as a relay, its host's partials of its local rank's requesters (and its
        own table- and column-wise rows, put in place): combine them a bag and send each requester its bags' rows
        (stage 2; started where ``start``, else done: either way ``.wait()`` gives them). host_relay.py."""
        c, state, (others, _) = self.c, self.relayed[g], self._split(g, ids)
        got, state["from"] = self.relay.gathered(g, self.route, self.places, self.recipes)
        state["got"] = got
        if others:  # this rank's own rows, put in its send order
            plain = np.flatnonzero(~got.keyed)
            mine = get_array_module(rows).zeros((self.route.group_index[g].size, rows.shape[1]), np.float32)
            mine[to_device(got.own[plain])] = rows[to_device(plain)]
            super()._place_group(out, g, others, mine)
        k = np.flatnonzero(got.keyed)
        state["partials"] = p = RowPartials(self.relay.bag_keys(got.requester[k], got.place[k]), got.length[k])
        requester = np.zeros(p.bags.size, np.int64)
        requester[p.bag_of] = got.requester[k]
        state["to"] = np.bincount(requester, minlength=c.comm.world_size).astype(np.int64)
        combined = p.combine(rows[to_device(k)], self._relay_mode()) if k.size else rows[:0]
        if start:
            return c.codecs.start_forward(c.comm, combined, state["to"])
        return _Received(c.codecs.alltoallv_forward(c.comm, combined, state["to"]))

    def _relay_receive(self, out, g, arrived):
        """Combine the rows stage 2 brought this rank's bags of group ``g`` over the hosts, into ``out``."""
        place, lengths, self.relayed[g]["back"] = self.relay.arriving(g, self.route, self.places)
        self._combine(out, g, place, lengths, arrived)

    def _relay_mode(self):
        return "max" if self.mode == "max" else "sum"  # a mean's division is the requester's

    def _send_grads(self, gy, g, width, ids):
        if g not in self.relayed:
            return super()._send_grads(gy, g, width, ids)
        c, state = self.c, self.relayed[g]
        send = get_array_module(gy).empty((int(state["back"].sum()), width), np.float32)
        if send.shape[0]:
            send[...] = self.partials[g].grads(self._bag_grads(gy, self.partials[g], width), self.mode)
        if hasattr(c.comm, "start"):
            back = c.codecs.start_backward(c.comm, send, state["back"])
        else:
            back = _Received(c.codecs.alltoallv_backward(c.comm, send, state["back"]))
        return _RelayedGrads(self, gy, g, ids, width, back)

    def _fill_grads(self, send, gy, g, ids):
        others, row = self._split(g, ids)
        super()._fill_grads(send, gy, g, others)
        if row.size:
            send[to_device(row)] = self.partials[g].grads(self._bag_grads(gy, self.partials[g], send.shape[1]),
                                                          self.mode)

    def _bag_grads(self, gy, p, w):
        """``gy``'s rows of the bags of the RowPartials ``p``, ``[n, w]``."""
        parts = [(bags, gy[to_device(pos), a:a + w]) for bags, pos, a in self._by_columns(p.bags)]
        if parts[0][0] is None:
            return parts[0][1]
        bag_grads = get_array_module(gy).empty((p.bags.size, w), gy.dtype)
        for bags, part in parts:
            bag_grads[to_device(bags)] = part
        return bag_grads

    def _by_columns(self, places):
        """``[(bags, pos, start)]``: the bags at ``places`` (``start·B·F + pos``) of each column start, ``bags``
        indexing ``places`` (None where every bag has one start, as row-wise streams have)."""
        n = self.B * self.F
        starts = places // n
        found = np.unique(starts)
        if found.size == 1:
            return [(None, places - found[0] * n, int(found[0]))]
        return [(b, places[b] - a * n, int(a)) for a in found for b in [np.flatnonzero(starts == a)]]

    def _split(self, g, ids):
        """``(others, row)``: the table- and column-wise streams among group ``g``'s ``ids``, and where the
        keyed streams' entries are in the group's send order."""
        rows = [s for s in ids if self.c.streams[s].keyed]
        entries = self.route.group_index[g]
        return [s for s in ids if s not in rows], np.flatnonzero(np.isin(self.route.stream[entries], rows))

    def _owner_mode(self, s):
        """A keyed owner sums a mean's sub-bags: the requester divides by the whole bag's length."""
        return "sum" if self.mode == "mean" and self.c.streams[s].keyed else self.mode

    @staticmethod
    def _reply_buffer(xp, shape):
        return xp.zeros(shape, np.float32)  # a stream whose bags were all empty looked nothing up: zeros

    def _read_replicas(self, out):
        self.replica_bags = {}
        for name, (shard, feats) in self.c.replicas.items():
            pos, bag = self.bags.sample_major(feats)
            at, lengths = self.bags.keys_of(bag)
            keys, w = self.bags.values[at], None if self.bags.weights is None else self.bags.weights[at]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            out[to_device(pos), :shard.table.config.dim] = shard.table.lookup(keys, offsets, self.mode, False, w).data
            self.replica_bags[name] = (pos, lengths, keys, w)

    def _replica_updates(self, gy):
        """All ranks' bags (lengths, keys, weights where any rank has them) and gradient rows of each replica,
        gathered in rank order; every replica runs one lookup of them and its backward."""
        c, comm = self.c, self.c.comm
        parts = [self.replica_bags[name] for name in c.replicas]
        T = len(parts)
        sizes = comm.allgather(np.array([[p[1].size for p in parts] + [p[2].size for p in parts]
                                         + [int(self.bags.weights is not None)]], np.int64), tag="dp_allgather")
        n_bags, n_keys = sizes[:, :T], sizes[:, T:2 * T]
        ints = comm.allgather(np.concatenate([np.concatenate([p[1], p[2]]) for p in parts]), tag="dp_allgather")
        weighted = bool(sizes[:, -1].any())
        if weighted:
            weights = comm.allgather(np.concatenate([np.ones(p[2].size, np.float32) if p[3] is None else p[3]
                                                     for p in parts]), tag="dp_allgather")
        grads = comm.allgather(gy[to_device(np.concatenate([p[0] for p in parts]))], tag="dp_allgather")
        int_at, key_at, bag_at = (_starts(x) for x in (n_bags + n_keys, n_keys, n_bags))
        for t, name in enumerate(c.replicas):
            lengths, keys, w, g = [], [], [], []
            for q in range(sizes.shape[0]):
                i, nb, nk = int_at[q, t], n_bags[q, t], n_keys[q, t]
                lengths.append(ints[i:i + nb])
                keys.append(ints[i + nb:i + nb + nk])
                w.append(weights[key_at[q, t]:key_at[q, t] + nk] if weighted else None)
                g.append(grads[bag_at[q, t]:bag_at[q, t] + nb])
            offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
            table = c.replicas[name][0].table
            y = table.lookup(np.concatenate(keys), offsets, self.mode, True,
                             np.concatenate(w) if weighted else None)
            y.backward(get_array_module(grads).concatenate(g)[:, :table.config.dim].astype(y.dtype))


def _starts(sizes):
    """Where each (rank, table) block of an allgather of ``sizes [W, T]`` starts."""
    flat = sizes.reshape(-1)
    return (np.cumsum(flat) - flat).reshape(sizes.shape)


class _RelayedGrads:
    """The backward's two stages of a relayed group: ``wait()`` waits for the gradients of this rank's requesters'
    bags (stage 2, reversed), spreads them over the partials, sends each owner those of its partials and this
    rank's own table- and column-wise gradient rows (stage 1, reversed), and gives what this rank received as an
    owner, in the order of its reply."""

    def __init__(self, op, gy, g, ids, width, back):
        self.op, self.gy, self.g, self.ids, self.width, self.back = op, gy, g, ids, width, back

    def wait(self):
        op, g = self.op, self.g
        c, state = op.c, op.relayed[g]
        got, xp = state["got"], get_array_module(self.gy)
        arrived = self.back.wait()[0]
        send = xp.empty((got.own.size, self.width), np.float32)
        k, plain = np.flatnonzero(got.keyed), np.flatnonzero(~got.keyed)
        if k.size:
            send[to_device(k)] = state["partials"].grads(arrived, op._relay_mode())
        others, _ = op._split(g, self.ids)
        if plain.size:
            mine = xp.empty((op.route.group_index[g].size, self.width), np.float32)
            ShardedLookup._fill_grads(op, mine, self.gy, g, others)
            send[to_device(plain)] = mine[to_device(got.own[plain])]
        received = c.codecs.alltoallv_backward(c.comm, send, state["from"])[0]
        grads = xp.empty_like(received)
        grads[to_device(state["order"])] = received
        return grads, None
