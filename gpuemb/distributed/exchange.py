"""One step of the sharded lookup as a differentiable op: keys out, rows back, gradients out, updates applied.

Forward, on every rank:
1. ``Route`` buckets this rank's keys by owner; the per-stream counts (``[W, S]``) and the keys go by alltoallv.
   On an overlapped communicator this happens during the step before (``keys_ahead.py``).
2. Each owner looks the keys of each of its shards up in ONE lookup of its local table, recording the lookup's
   backward (which is the fused row update).
3. The rows go back by one alltoallv per width group, through the forward codec, and are put into ``[B, F, D]``;
   data-parallel tables read the local replica. On an overlapped communicator the alltoallvs start and the op
   returns at once; the rows are put in place when its output is first read (``autograd/arriving.py``), so what
   the model computes before that (DLRM's bottom MLP) runs while they travel.

Backward, on every rank, in the same order:
1. The gradient rows, divided by the world size (each rank's loss is the mean over its own batch, so the global
   batch's gradient is the ranks' mean; not where the collection's ``rank_mean`` is off), go back to the owners by
   alltoallv through the backward codec. On an overlapped communicator the alltoallvs start, and steps 2 to 4 wait
   for them in ``collection.row_updates`` until the step's end (``row_updates.py``); the op's backward runs before
   the bottom MLP's (``early_backward``), so the gradients travel during the rest of the backward.
2. Each owner runs its lookups' backward on the rows it received from all ranks, so duplicate keys from several
   ranks are summed (sort-based, deterministic) before the row rule runs once, as on one rank. They arrive peer
   by peer, each peer's in its batch order: global sample order on any world size, so a key's sum is the same bits
   on 1, 2 or 4 ranks where the gradients are (``--deterministic``).
3. Column shards under row-wise Adagrad exchange their per-key squared-gradient sums and finish their updates.
4. Data-parallel tables allgather the keys and gradient rows of every rank, and every replica applies the same
   summed update.

Every rank calls the same collectives in the same order, decided by the plan alone, even with nothing to send.
"""
import numpy as np

from gpuemb.autograd import Function, launches
from gpuemb.autograd.backend import get_array_module, to_device, to_host
from gpuemb.kernels.embedding_bag import embedding_bag

from .routing import Arrivals, Route


class ShardedLookup(Function):
    """``ShardedLookup(collection, keys, training).apply(anchor)``: ``[B, F, D]`` float32 rows of ``keys [B, F]``
    (int64, mixed per feature where features share a table). ``anchor`` is a leaf that requires a gradient
    exactly when this step trains, so the tape records the op; it gets no gradient."""

    early_backward = True  # the gradients leave for their owners before the bottom MLP's backward runs
    _index = None  # under dedup, each group's (expand, order, offsets) on the device (``_dedup_index``)

    def __init__(self, collection, keys, training, routed=None):
        self.c, self.keys, self.training, self.routed = collection, keys, training, routed
        self.B, self.F = keys.shape
        self.groups = collection.groups

    def forward(self, anchor):
        c = self.c
        B, F = self.B, self.F
        xp = get_array_module(anchor)
        out = xp.zeros((B * F, c.layout.slot), np.float32)
        self.owned, self.arrive, started = {}, None, []
        if c.streams:
            self._look_up()
            later = hasattr(c.comm, "start")  # overlapped: the rows travel until the output is first read
            for g, (width, ids) in enumerate(self.groups):
                reply, counts = self._outgoing(xp, g, width, ids)
                if later:
                    started.append((g, ids, c.codecs.start_forward(c.comm, reply, counts)))
                else:
                    self._place_group(out, g, ids, c.codecs.alltoallv_forward(c.comm, reply, counts)[0])
        if c.replicas:
            self._read_replicas(out)
        y = c.layout.outward(out, B)
        if started:
            started = self._started(out, started)
            self.arrive = lambda: self._arrive(out, y, started)
        return y

    def _started(self, out, started):
        """What the output waits for, ``[(g, ids, pending)]``, once every group's all-to-all has started: here the
        started ones themselves (the pooled exchange's relay goes on with some of them first)."""
        return started

    def _reply(self, xp, g, width, ids):
        """The rows of group ``g`` (streams ``ids`` of ``width``) looked up here, in the order their requesters
        sent the keys."""
        a = self.arrivals
        reply = self._reply_buffer(xp, (a.group_sizes[g], width))
        for s in ids:
            if s in self.owned:
                reply[to_device(a.reply_pos[s])] = self.owned[s].data
        return reply

    def _outgoing(self, xp, g, width, ids):
        """``(rows, counts [W])``: what this owner sends in group ``g``'s all-to-all, its reply to each requester."""
        return self._reply(xp, g, width, ids), self.arrivals.group_counts[g]

    def _arrive(self, out, y, started):
        """Place the rows of each started group as they arrive, then fill the output ``y`` made from ``out``."""
        for g, ids, pending in started:
            self._place_group(out, g, ids, pending.wait()[0])
        if self.c.layout.mixed:  # the output is a gather of out's columns, not a view of it
            y[...] = self.c.layout.outward(out, self.B)

    def _place_group(self, out, g, ids, rows):
        """Write the ``rows`` that came back for group ``g`` (in this rank's send order) of streams ``ids``."""
        entries = self.route.group_index[g]
        if self.route.expand is not None:  # a key sent once came back once: its row goes to each of its places
            rows = rows[self._dedup_index()[g][0]]
        for s in ids:
            mine = np.flatnonzero(self.route.stream[entries] == s)
            self._place(out, s, entries[mine], rows[to_device(mine)])

    def _dedup_index(self):
        """Per group, the route's ``(expand, order, offsets)`` on the device: every group's in one copy, at first
        use (on a GPU each copy from the host costs a call and a wait of its own)."""
        if self._index is None:
            r = self.route
            parts = [a for e, (o, f) in zip(r.expand, r.sums) for a in (e, o, f)]
            flat = to_device(np.concatenate(parts).astype(np.int64))
            ends = np.cumsum([a.size for a in parts])
            pieces = [flat[end - a.size:end] for a, end in zip(parts, ends)]
            self._index = [tuple(pieces[3 * g:3 * g + 3]) for g in range(len(r.expand))]
        return self._index

    def _look_up(self):
        """Route this rank's keys to their owners and look up, at each shard held here, the keys it received."""
        c, comm, W = self.c, self.c.comm, self.c.comm.world_size
        if self.routed is None:
            self.route = r = Route(self.keys, c.table_of, c.streams, self.groups, W, c.dedup)
            counts, _ = comm.alltoallv(r.stream_counts, np.ones(W, np.int64), tag="a2a_keys")
            received, _ = comm.alltoallv(r.keys, r.send_counts, tag="a2a_keys")
        else:  # started during the last step (``KeysAhead``)
            self.route, counts, received = self.routed.take()
        self.arrivals = a = Arrivals(counts, self.groups)
        for s in c.local_streams:
            k = received[a.index[s]]
            if k.size:
                self.owned[s] = c.shard_of(s).table.lookup(k, insert=self.training)

    @staticmethod
    def _reply_buffer(xp, shape):
        return xp.empty(shape, np.float32)  # every row of it is a looked-up row

    def _place(self, out, s, entries, rows):
        """Write the ``rows`` that came back for ``entries`` (of stream ``s``, in send order) into ``out``."""
        start, stop = self.c.streams[s].cols
        out[to_device(self.route.pos[entries]), start:stop] = rows

    def _grad_rows(self, gy, s, entries):
        """The gradient rows to send for ``entries`` of stream ``s``: ``gy``'s at their places and columns."""
        start, stop = self.c.streams[s].cols
        return gy[to_device(self.route.pos[entries]), start:stop]

    def _fill_grads(self, send, gy, g, ids):
        """Write into ``send`` the gradient rows of group ``g``'s entries (streams ``ids``), in send order."""
        entries = self.route.group_index[g]
        for s in ids:
            mine = np.flatnonzero(self.route.stream[entries] == s)
            send[to_device(mine)] = self._grad_rows(gy, s, entries[mine])

    def _read_replicas(self, out):
        """Fill the data-parallel tables' places from the local replicas, without inserting."""
        for name, (shard, feats) in self.c.replicas.items():
            pos = self._positions(self.B, self.F, feats)
            with_no_insert = shard.table.lookup(self.keys.reshape(-1)[pos], insert=False)
            out[to_device(pos), :shard.table.config.dim] = with_no_insert.data

    @staticmethod
    def _positions(B, F, feats):
        return (np.arange(B)[:, None] * F + np.asarray(feats)[None, :]).reshape(-1)

    def backward(self, gy):
        c = self.c
        gy = c.layout.inward(gy, self.B)
        if c.rank_mean:
            gy = gy / np.float32(c.comm.world_size)
        sent = [self._send_grads(gy, g, width, ids) for g, (width, ids) in enumerate(self.groups)] \
            if c.streams else []
        c.row_updates.add(lambda: self._update(gy, sent))  # at once, or once the gradients arrived (row_updates.py)
        return None

    def _send_grads(self, gy, g, width, ids):
        """Send group ``g``'s gradient rows to their owners: started on an overlapped communicator, so they travel
        during the rest of the backward; ``.wait()`` of the result gives what this rank received."""
        c, r = self.c, self.route
        send = get_array_module(gy).empty((r.group_index[g].size, width), np.float32)
        self._fill_grads(send, gy, g, ids)
        if r.sums is not None:  # a key sent once: the gradients of its places go back added up, in batch order
            _, order, offsets = self._dedup_index()[g]
            send = embedding_bag(send, order, offsets, "sum")
        if hasattr(c.comm, "start"):
            return c.codecs.start_backward(c.comm, send, r.group_counts[g])
        return _Received(c.codecs.alltoallv_backward(c.comm, send, r.group_counts[g]))

    def _update(self, gy, sent):
        """The owners' row updates from the ``sent`` gradients, then the column sums and the replicas' updates."""
        c = self.c
        with launches.phase(launches.backward_phase(self.phase)):  # where it runs late, it still counts as its own
            for (_, ids), pending in zip(self.groups, sent):
                grads = pending.wait()[0]
                for s in ids:
                    if s in self.owned:
                        y = self.owned[s]
                        y.backward(grads[to_device(self.arrivals.reply_pos[s])].astype(y.dtype))
            if c.streams and c.coupled:
                self._finish_columns()
            if c.replicas:
                self._replica_updates(gy)

    def _finish_columns(self):
        """Add up each coupled column table's per-key sums over its shards (one alltoallv), then update."""
        c, comm = self.c, self.c.comm
        W, me = comm.world_size, comm.rank
        mine = {name: c.shards[name].table.pending_sums() for name, _ in c.coupled if name in c.shards}
        parts, counts = [], np.zeros(W, np.int64)
        for p in range(W):
            for name, ranks in c.coupled:
                if me in ranks and p in ranks:
                    parts.append(mine[name])
                    counts[p] += mine[name].size
        got, got_counts = comm.alltoallv(np.concatenate(parts or [np.zeros(0)]), counts, tag="column_sums")
        at = 0
        totals = {name: 0.0 for name in mine}
        for p in range(W):
            for name, ranks in c.coupled:
                if me in ranks and p in ranks:
                    n = mine[name].size
                    totals[name] = totals[name] + got[at:at + n]
                    at += n
        for name, total in totals.items():
            c.shards[name].table.finish(total)

    def _replica_updates(self, gy):
        """Every rank applies the same summed update to each data-parallel table: all ranks' keys and gradient
        rows, gathered in rank order, through one lookup and its backward."""
        c, comm = self.c, self.c.comm
        names = list(c.replicas)
        pos = [self._positions(self.B, self.F, feats) for _, feats in c.replicas.values()]
        sizes = comm.allgather(np.array([[p.size for p in pos]], np.int64), tag="dp_allgather")
        keys = comm.allgather(np.concatenate([self.keys.reshape(-1)[p] for p in pos]), tag="dp_allgather")
        grads = comm.allgather(gy[to_device(np.concatenate(pos))], tag="dp_allgather")
        ends = np.cumsum(sizes.reshape(-1)).reshape(sizes.shape)  # [W, T]: where each (rank, table) block ends
        for t, name in enumerate(names):
            rows = np.concatenate([np.arange(ends[q, t] - sizes[q, t], ends[q, t]) for q in range(sizes.shape[0])])
            if rows.size:
                table = c.replicas[name][0].table
                y = table.lookup(to_host(keys)[rows])
                y.backward(grads[to_device(rows), :table.config.dim].astype(y.dtype))


class _Received:
    """A blocking all-to-all's result, waited for as a started one is."""

    def __init__(self, result):
        self.result = result

    def wait(self):
        return self.result
