"""One step of the sharded lookup of pooled features: bags out, pooled rows back, gradients out, updates applied.

The steps of ``ShardedLookup`` (exchange.py), with bags in place of keys (``bag_routing.py``):

- Table- and column-wise: each bag goes whole to its owner, which pools it in its one lookup of the step (by the
  collection's mode: sum, weighted sum, mean or max; a column shard pools its own columns), and sends back one
  row a bag. The backward sends one gradient row a bag, and the lookup's backward routes it as in one process.
- Row-wise: every rank gets every bag's sub-bag of the keys it owns and pools it (sum, or max), so every owner
  holds a partial row for every bag of every rank. Sum and mean combine them as TorchRec does, by one
  reduce-scatter a width: owner o lays its partials out as W blocks, block q the bags of rank q (padded to the
  largest rank's count), and rank q gets block q summed over the owners (a mean then divides by the bag's
  length). Under a compressed forward codec (int8 rows carry their own scales, which do not add on the wire) and
  for max, the partials go back by the rows' all-to-all instead, and the requester combines them: it sums them,
  or takes the elementwise max over the owners whose sub-bag was not empty. The backward sends each owner the
  bag's gradient (over the bag's length for a mean), the reduce-scatter's transpose; for max, only the owner
  whose partial won an element gets that element's gradient, and its lookup's backward routes it to the row that
  held its max.
- Data-parallel: each replica pools its rank's bags; the backward gathers every rank's bags and gradients and
  every replica applies them, as for single keys.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, to_device
from gpuemb.io.bags import concat_ranges

from .bag_routing import ArrivedBags, BagRoute, pack
from .exchange import ShardedLookup
from .routing import Arrivals


class ShardedPooledLookup(ShardedLookup):
    """``ShardedPooledLookup(collection, bags, training).apply(anchor)``: ``[B, F, D]`` float32, the ``LocalBags``
    ``bags`` pooled by the collection's mode."""

    def __init__(self, collection, bags, training):
        self.c, self.bags, self.training = collection, bags, training
        self.F, self.B = bags.lengths.shape
        self.mode = collection.mode
        self.partials = {}  # row-wise stream: (sub-bag lengths [W, n], each max element's owner or None)
        self.groups, self.reduced = reduce_scattered(collection)

    def _look_up(self):
        c, comm, W = self.c, self.c.comm, self.c.comm.world_size
        S = len(c.streams)
        self.route = r = BagRoute(self.bags, c.table_of, c.streams, self.groups, W, c.owner)
        # each rank says whether it has weights, so that all send them or none do
        head = np.concatenate([r.stream_counts, np.full((W, 1), int(self.bags.weights is not None))], axis=1)
        counts, _ = comm.alltoallv(head, np.ones(W, np.int64), tag="a2a_keys")
        payload, recv_counts = comm.alltoallv(pack(r.lengths, r.keys, r.send_counts, r.key_counts),
                                              r.send_counts + r.key_counts, tag="a2a_keys")
        weights = None
        if counts[:, S].any():
            mine = r.weights if r.weights is not None else np.ones(r.keys.size, np.float32)
            weights, _ = comm.alltoallv(mine, r.key_counts, tag="a2a_keys")
        arrived = ArrivedBags(payload, recv_counts, counts[:, :S].sum(axis=1), weights)
        self.counts = counts[:, :S]
        self.arrivals = a = Arrivals(self.counts, self.groups)
        for s in c.local_streams:
            keys, offsets, w = arrived.bags(a.index[s])
            if keys.size:
                self.owned[s] = c.shard_of(s).table.lookup(keys, offsets, self._owner_mode(s), self.training, w)

    def _return_rows(self, out, g, width, ids):
        if g not in self.reduced:
            return super()._return_rows(out, g, width, ids)
        c, r = self.c, self.route
        W, xp = c.comm.world_size, get_array_module(out)
        n = self.counts[:, ids]  # [W, k]: each rank's bags of each stream, sent whole to every owner
        N = n.max(axis=0)
        at = np.cumsum(N) - N  # where each stream's rows start in a block
        R = int(N.sum())
        send = xp.zeros((W * R, width), np.float32)  # a sub-bag that held no key here, and padding, add zeros
        for j, s in enumerate(ids):
            if s in self.owned:  # its rows arrive peer by peer, each peer's in its bag order, to block q's slots
                send[to_device(concat_ranges(np.arange(W) * R + at[j], n[:, j]))] = self.owned[s].data
        mine = c.comm.reduce_scatter(send, tag="a2a_fwd")
        entries = r.group_index[g]
        for j, s in enumerate(ids):
            e = entries[r.stream[entries] == s]  # W blocks of this rank's bags, one a owner, in one bag order
            m = e.size // W
            lengths = r.lengths[e].reshape(W, m)
            pooled = mine[at[j]:at[j] + m]
            if self.mode == "mean":
                pooled = pooled / bag_sizes(lengths, xp)
            self.partials[s] = (lengths, None)
            start, stop = c.streams[s].cols
            out[to_device(r.pos[e[:m]]), start:stop] = pooled

    def _owner_mode(self, s):
        """A row-wise owner sums a mean's sub-bags: the requester divides by the whole bag's length."""
        return "sum" if self.mode == "mean" and self.c.streams[s].kind == "row" else self.mode

    @staticmethod
    def _reply_buffer(xp, shape):
        return xp.zeros(shape, np.float32)  # a stream whose sub-bags were all empty looked nothing up: zeros

    def _place(self, out, s, entries, rows):
        st = self.c.streams[s]
        if st.kind != "row":
            return super()._place(out, s, entries, rows)
        W = self.c.comm.world_size
        n = entries.size // W
        lengths = self.route.lengths[entries].reshape(W, n)
        pooled, winner = combine(rows.reshape(W, n, st.width), lengths, self.mode)
        self.partials[s] = (lengths, winner)
        out[to_device(self.route.pos[entries[:n]]), st.cols[0]:st.cols[1]] = pooled

    def _grad_rows(self, gy, s, entries):
        st = self.c.streams[s]
        if st.kind != "row":
            return super()._grad_rows(gy, s, entries)
        W = self.c.comm.world_size
        n = entries.size // W
        g = super()._grad_rows(gy, s, entries[:n])
        xp = get_array_module(g)
        lengths, winner = self.partials[s]
        if self.mode == "mean":
            g = g / bag_sizes(lengths, xp)
        if winner is not None:  # each element's gradient to the owner whose partial max won it, zeros elsewhere
            return xp.where(winner[None] == xp.arange(W)[:, None, None], g[None], 0).reshape(W * n, st.width)
        return xp.broadcast_to(g, (W, n, st.width)).reshape(W * n, st.width)

    def _read_replicas(self, out):
        self.replica_bags = {}
        for name, (shard, feats) in self.c.replicas.items():
            pos, bag = self.bags.sample_major(feats)
            at, lengths = self.bags.keys_of(bag)
            keys, w = self.bags.values[at], None if self.bags.weights is None else self.bags.weights[at]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            out[to_device(pos)] = shard.table.lookup(keys, offsets, self.mode, False, w).data
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
            y.backward(get_array_module(grads).concatenate(g).astype(y.dtype))


def reduce_scattered(c):
    """``(groups, reduced)``: the groups of the exchange of ``c``'s bags, and which of them return by reduce-scatter.
    The row-wise streams of a sum or mean under the fp32 forward codec leave their width's group for a group of
    their own; the same on every rank, since it follows from the plan, the mode and the codec."""
    if c.mode == "max" or c.codecs.forward != "fp32":
        return c.groups, set()
    kept, reduced = [], []
    for width, ids in c.groups:
        rows = [s for s in ids if c.streams[s].kind == "row"]
        others = [s for s in ids if c.streams[s].kind != "row"]
        kept += [(width, others)] if others else []
        reduced += [(width, rows)] if rows else []
    return kept + reduced, set(range(len(kept), len(kept) + len(reduced)))


def _starts(sizes):
    """Where each (rank, table) block of an allgather of ``sizes [W, T]`` starts."""
    flat = sizes.reshape(-1)
    return (np.cumsum(flat) - flat).reshape(sizes.shape)


def combine(parts, lengths, mode):
    """The rows of n bags from the W owners' partial rows ``parts [W, n, w]`` of sub-bags of ``lengths [W, n]``:
    ``(rows [n, w], winner)``. Summed in rank order (a mean divided by the bag's length); for max, the max over the
    owners whose sub-bag held a key (zeros where none did), and ``winner [n, w]``, the owner whose partial is each
    element (the lowest rank on a tie), else None."""
    xp = get_array_module(parts)
    if mode != "max":
        total = parts.sum(axis=0)
        if mode == "mean":
            total = total / bag_sizes(lengths, xp)
        return total, None
    held = xp.asarray(lengths > 0)[:, :, None]
    masked = xp.where(held, parts, -np.inf)
    winner = masked.argmax(axis=0)
    best = xp.take_along_axis(masked, winner[None], axis=0)[0]
    return xp.where(held.any(axis=0), best, 0).astype(np.float32), winner


def bag_sizes(lengths, xp):
    """``[n, 1]`` float32: each bag's length from its sub-bags' ``lengths [W, n]``, an empty one's 1 (it is zeros)."""
    return xp.asarray(np.maximum(lengths.sum(axis=0), 1), np.float32)[:, None]
