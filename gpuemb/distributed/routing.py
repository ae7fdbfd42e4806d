"""Where each key of a batch goes, and where each row that comes back belongs: the bookkeeping of the all-to-all.

A *stream* is one column range of a table that keys are sent to: a table-wise table's shard, a row-wise table (one
stream whose owner depends on the key: ``owner_hash(key) % W``), one column shard of a column-wise table (every key
goes to every column shard), a table-row-wise table (its owner by the key among one host's ranks), or one column
range of a grid table (every key goes to every range, each range's owner by the key among its host's ranks).
Data-parallel tables have no stream: each rank reads its replica. Streams are numbered the
same way on every rank, ordered by the width of the rows they return, so all streams of one width form a
contiguous *group*; the rows of one group travel in one all-to-all (the rows of an all-to-all share a width).

Per step, the requester's ``Route`` sorts its (key, stream) pairs by destination rank, then stream. The owner's
``Arrivals`` finds, for each of its streams, which received keys are that stream's, and where the row of each
received key goes in the reply of its group. The reply of a group is the received keys of that group in the
order they arrived, so the requester reads it back in its own send order restricted to the group.

With ``dedup``, a key that a rank sends several times to one owner for one stream goes once (TorchRec's index
dedup): the owner looks it up and returns it once, and the requester copies the row to each place
(``expand``) and adds up the places' gradients before they go back (``sums``). On skewed data a batch's hot keys
then cost a rank one key, one row and one gradient each, however often they occur. The owner adds the ranks'
partial sums, so a row's gradient rounds by the world size: not for ``--deterministic``.
"""
from dataclasses import dataclass

import numpy as np

from gpuemb.kernels.embedding_bag import counting_order
from gpuemb.kernels.unique import first_seen
from gpuemb.sharding.plan import owner_among

KEYED = ("row", "table_row", "grid")  # the kinds whose owner depends on the key


@dataclass(frozen=True)
class Stream:
    """Table ``table`` (index into the collection's tables), placement ``kind``, weight columns ``cols``;
    ``ranks``: its shards' ranks by residue, among which a key's owner is picked by its hash; ``rank`` is the
    owner (-1 where it depends on the key)."""
    table: int
    kind: str
    cols: tuple
    rank: int
    ranks: tuple = ()

    @property
    def width(self):
        return self.cols[1] - self.cols[0]

    @property
    def keyed(self):
        """Whether a key's owner depends on the key: its bags split into sub-bags, one to each owner."""
        return self.kind in KEYED

    def held_by(self, rank):
        return rank in self.ranks

    def owners(self, keys):
        """The owning rank of each of ``keys``: ``[n]``."""
        return owner_among(self.ranks, keys)


def streams_of(plan, names):
    """The streams of the tables ``names`` (in the collection's order) under ``plan``: ``(streams, groups)`` where
    ``groups`` is ``[(width, [stream ids])]``, widest first, each group's ids contiguous."""
    found = []
    for t, name in enumerate(names):
        p = plan.placement(name)
        if p.kind == "data":
            continue
        found += [Stream(t, p.kind, cols, -1 if p.kind in KEYED else ranks[0], ranks)
                  for cols, ranks in plan.owners(name)]
    streams = sorted(found, key=lambda s: (-s.width, s.table, s.cols))
    groups = []
    for i, s in enumerate(streams):
        if groups and groups[-1][0] == s.width:
            groups[-1][1].append(i)
        else:
            groups.append((s.width, [i]))
    return streams, groups


class Route:
    """The requester's side of one step: which keys go where, in the order they are sent.

    ``keys [B, F]`` int64 (already mixed per feature where features share a table), ``table_of [F]`` the table of
    each feature. After it:
    ``keys``, ``pos`` (flat index ``b·F + f`` into ``[B, F]``) and ``stream`` of each sent entry, in send order;
    ``send_counts [W]``; ``stream_counts [W, S]``; and per group g, ``group_index[g]`` (the entries of the group,
    in send order) and ``group_counts[g] [W]``.

    ``dedup``: entries of one (destination, stream, key) are sent once, in order of first sight. ``pos``,
    ``stream``, ``dest`` and ``group_index`` still list every entry; ``keys`` and the counts are what is sent;
    ``expand[g]`` gives each entry of ``group_index[g]`` its row among the group's rows that come back, and
    ``sums[g]`` is ``(order, offsets)``: the group's entries by that row, in send order within, the bags of an
    ``embedding_bag`` sum of their gradients. Without it both are None.
    """
    expand = sums = None

    def __init__(self, keys, table_of, streams, groups, world_size, dedup=False):
        B, F = keys.shape
        W = world_size
        pos, sid, dest = [], [], []
        for i, st in enumerate(streams):
            feats = np.flatnonzero(np.asarray(table_of) == st.table)
            p = (np.arange(B)[:, None] * F + feats[None, :]).reshape(-1)
            pos.append(p)
            sid.append(np.full(p.size, i, np.int64))
            dest.append(st.owners(keys.reshape(-1)[p]))
        self._sort(pos, sid, dest, groups, W)
        self.keys = np.ascontiguousarray(keys.reshape(-1)[self.pos])
        if dedup:
            self._dedup(groups, W)

    def _dedup(self, groups, W):
        """Send each (destination, stream, key) once (the class docstring), numbered in order of first sight: the
        entries are in send order, so the distinct ones are too. Two passes of a hash table and a counting sort a
        group, no comparison sort: at 53,248 entries (W = 2, 26 tables) they add 1.9 ms to the route's 4.7 on a
        2-core CPU, where sorting by owner, stream and key added 6.7."""
        S = self.stream_counts.shape[1]
        distinct, key_id = first_seen(self.keys)
        K = max(distinct.size, 1)
        pairs, sent_of = first_seen((self.dest * S + self.stream) * K + key_id)  # one id a (segment, key)
        sent_seg = pairs // K
        self.keys = np.ascontiguousarray(distinct[pairs % K])
        self.stream_counts = np.bincount(sent_seg, minlength=W * S).reshape(W, S).astype(np.int64)
        self.send_counts = self.stream_counts.sum(axis=1)
        self.group_counts = [self.stream_counts[:, ids].sum(axis=1) for _, ids in groups]
        sent_group = group_ids(groups, S)[sent_seg % S]
        in_group = np.zeros(sent_seg.size, np.int64)  # a sent key's row among its group's rows
        for g in range(len(groups)):
            mine = sent_group == g
            in_group[mine] = np.arange(int(mine.sum()))
        self.expand, self.sums = [], []
        for e, m in zip(self.group_index, self.group_counts):
            rows = in_group[sent_of[e]]
            counts = np.bincount(rows, minlength=int(m.sum()))
            self.expand.append(rows)
            self.sums.append((counting_order(rows, counts), np.concatenate([[0], np.cumsum(counts)])))

    def _sort(self, pos, sid, dest, groups, W):
        """Put the entries (lists of per-stream arrays ``pos``, ``sid``, ``dest``) in send order and count them;
        returns the order (an index into the concatenated entries)."""
        S = len(pos)
        pos, sid, dest = (np.concatenate(a).astype(np.int64) if S else np.zeros(0, np.int64) for a in (pos, sid, dest))
        order = np.lexsort((sid, dest))  # by destination, then stream; stable, so batch order within
        self.pos, self.stream, self.dest = pos[order], sid[order], dest[order]
        self.send_counts = np.bincount(self.dest, minlength=W).astype(np.int64)
        self.stream_counts = np.zeros((W, S), np.int64)
        np.add.at(self.stream_counts, (self.dest, self.stream), 1)
        group_of = group_ids(groups, S)
        self.group_index = [np.flatnonzero(group_of[self.stream] == g) for g in range(len(groups))]
        self.group_counts = [self.stream_counts[:, ids].sum(axis=1) for _, ids in groups]
        return order


def group_ids(groups, n_streams):
    """The group of each stream: ``[S]``."""
    out = np.zeros(n_streams, np.int64)
    for g, (_, ids) in enumerate(groups):
        out[ids] = g
    return out


class Arrivals:
    """The owner's side of one step, from ``counts [W, S]``: how many keys each peer sent for each stream.

    The received keys arrive peer by peer, each peer's sorted by stream. ``index[s]``: the positions among the
    received keys of stream s's keys (peer order); ``reply_pos[s]``: where their rows go in the reply of the
    stream's group; ``group_counts[g] [W]``: the rows of group g that go back to each peer.
    """

    def __init__(self, counts, groups):
        W, S = counts.shape
        sid = np.repeat(np.tile(np.arange(S), W), counts.reshape(-1))  # the stream of each received key
        group_of = group_ids(groups, S)
        gid = group_of[sid]
        rank_in_group = np.zeros(sid.size, np.int64)
        for g in range(len(groups)):
            mine = gid == g
            rank_in_group[mine] = np.arange(int(mine.sum()))
        self.index = [np.flatnonzero(sid == s) for s in range(S)]
        self.reply_pos = [rank_in_group[i] for i in self.index]
        self.group_sizes = [int(np.count_nonzero(gid == g)) for g in range(len(groups))]
        self.group_counts = [counts[:, ids].sum(axis=1) for _, ids in groups]
