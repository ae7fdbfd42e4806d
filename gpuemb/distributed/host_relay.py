"""ZionEX's two-level exchange of keyed partials: a bag's partial rows combine within the owners' host, and one row
a bag crosses between hosts.

Single-level, a requester's bag of a keyed stream (row-wise, table-row-wise, a grid's column range) goes as a
sub-bag to each owner of one of its keys, and each owner sends its partial row straight back: a bag spread over the
L ranks of another host crosses hosts as up to L rows, and so does its gradient. Where the plan states its hosts
(``local_ranks`` L, with 1 < L < W: ``sharding.hierarchical.relay_hosts``), the partials go by way of a *relay*
instead: for requester p and an owner on host h, the rank of host h with p's local rank, ``h·L + p % L`` (p itself
on p's own host).

- The keys go straight from requester to owner, as before (a key crosses once either way). With them, each
  requester sends each relay on another host its *recipe*: how many sub-bags of each group it sent each owner
  there (``L·G`` int64 for G groups), then the place of each sub-bag's bag (an int64), in its send order. Its own
  host's relay is itself.
- Stage 1, within a host (``a2a_fwd``, one all-to-all a group as before): each owner sends a keyed partial to its
  relay, and a table- or column-wise row straight to its requester.
- The relay combines the partials of each (requester, bag) over its host's owners, in owner order (sum, or max
  with the winner kept), and stage 2 sends one row a bag to each requester of its local rank: between hosts, and
  to itself for its own bags. The requester combines the rows of a bag over hosts (``row_partials.py``): their
  sum, over the bag's whole length for a mean, or their max.
- The backward runs the two stages in reverse (``a2a_bwd``): one gradient row a (bag, host) to the relay, which
  spreads it over the partials (for max, to the winner only), then each owner gets its partials' gradients in the
  order it sent them, so its lookup's backward sees the rows as single-level.

On an overlapped communicator the forward waits for stage 1 and starts stage 2 before the lookup returns, so that
stage 2, between hosts, is the one that travels during the bottom MLP; the backward starts stage 2's gradients
during the backward and runs stage 1's with the held row updates (``ShardedPooledLookup._started``).

A table-row-wise bag's partials are those of one host, so the relay's sum runs over the same owners in the same
order as the requester's did single-level, and the requester's over one row is a copy: the same bits. Between
hosts a bag of a row-wise table crosses once a host instead of once an owner. The price is a second all-to-all a
group each way, and the keyed rows pass the wire codec twice (an int8 codec rounds twice).
"""
from dataclasses import dataclass

import numpy as np

from .routing import group_ids


@dataclass
class _Gathered:
    """What a relay receives in stage 1 of one group, in arrival order (owner, then requester, then the requester's
    send order): ``own`` (this rank's own entries among them, as positions in its group send order; -1 for another
    requester's), ``keyed``, ``requester``, ``owner``, ``place``, ``length``."""
    own: np.ndarray
    keyed: np.ndarray
    requester: np.ndarray
    owner: np.ndarray
    place: np.ndarray
    length: np.ndarray


class HostRelay:
    """The bookkeeping of the two-level exchange on one rank, for the streams and groups of a collection: built once
    with it; what a step receives (the recipes) is passed back in by the step."""

    def __init__(self, local_ranks, rank, world_size, streams, groups):
        self.L, self.me, self.W = local_ranks, rank, world_size
        S = len(streams)
        self.keyed = np.array([st.keyed for st in streams], bool)
        self.start = np.array([st.cols[0] for st in streams], np.int64)
        self.group_of = group_ids(groups, S)
        self.G = len(groups)
        self.groups = {g for g, (_, ids) in enumerate(groups) if self.keyed[ids].any()}  # the relayed groups

    def relay(self, requester, owner):
        """The relay of a keyed partial from ``owner`` for ``requester`` (arrays or ints)."""
        return owner // self.L * self.L + requester % self.L

    # -- the requester, at the key exchange -------------------------------------------------------------------------
    def places(self, route, n_places):
        """Each entry's place: its bag's flat index, offset by its column range's start (a grid's ranges share a
        bag)."""
        return self.start[route.stream] * n_places + route.pos

    def recipes(self, route, places):
        """``(flat int64, sizes [W])``: the recipe for each relay on another host, one after the other (docs above),
        and how many int64 each takes."""
        L, relay = self.L, self.relay(self.me, route.dest)
        out = self.keyed[route.stream] & (relay != self.me)
        parts, sizes = [], np.zeros(self.W, np.int64)
        for q in range(self.me % L, self.W, L):
            if q == self.me:
                continue
            mine = np.flatnonzero(out & (relay == q))  # in send order: owner, then group, then batch
            counts = np.bincount((route.dest[mine] - q // L * L) * self.G + self.group_of[route.stream[mine]],
                                 minlength=L * self.G)
            parts += [counts, places[mine]]
            sizes[q] = counts.size + mine.size
        return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), sizes

    def received(self, flat, sizes):
        """The sub-bags of the recipes that each requester sent this rank (``sizes [W]`` int64 from each), one a row:
        ``[n, 4]`` of requester, owner, group and place."""
        L, G, found, at = self.L, self.G, [], 0
        owners = np.repeat(self.me // L * L + np.arange(L), G)
        groups = np.tile(np.arange(G), L)
        for p in np.flatnonzero(sizes):
            block, at = flat[at:at + sizes[p]], at + sizes[p]
            counts = block[:L * G]
            found.append(np.stack([np.full(block.size - L * G, p), np.repeat(owners, counts),
                                   np.repeat(groups, counts), block[L * G:]], axis=1))
        return np.concatenate(found) if found else np.zeros((0, 4), np.int64)

    # -- the owner, stage 1 ---------------------------------------------------------------------------------------
    def stage1_order(self, counts, ids):
        """``(order, send_counts [W])``: the owner's reply of a group (``counts [W, S]`` entries from each peer,
        streams ``ids``) reordered for stage 1: a keyed row to its relay, the others to their requester."""
        per = counts[:, ids].reshape(-1)
        peer = np.repeat(np.repeat(np.arange(self.W), len(ids)), per)
        stream = np.repeat(np.tile(np.asarray(ids), self.W), per)
        dest = np.where(self.keyed[stream], self.relay(peer, self.me), peer)
        return np.argsort(dest, kind="stable"), np.bincount(dest, minlength=self.W).astype(np.int64)

    # -- the relay ------------------------------------------------------------------------------------------------
    def gathered(self, g, route, places, others):
        """What this rank receives in stage 1 of group ``g`` (``_Gathered``), and the counts from each owner;
        ``others``: the sub-bags of the recipes it received (``received``)."""
        idx = route.group_index[g]
        owner, keyed = route.dest[idx], self.keyed[route.stream[idx]]
        mine = ~keyed | (self.relay(self.me, owner) == self.me)
        theirs = others[others[:, 2] == g]
        n, m = int(mine.sum()), theirs.shape[0]  # the relay needs no length: it sums or takes the max
        requester = np.concatenate([np.full(n, self.me), theirs[:, 0]])
        owner = np.concatenate([owner[mine], theirs[:, 1]])
        seq = np.concatenate([np.arange(n), np.arange(m)])  # each requester's own send order
        order = np.lexsort((seq, requester, owner))
        found = _Gathered(np.concatenate([np.flatnonzero(mine), np.full(m, -1)])[order],
                          np.concatenate([keyed[mine], np.ones(m, bool)])[order], requester[order], owner[order],
                          np.concatenate([places[idx][mine], theirs[:, 3]])[order],
                          np.concatenate([route.lengths[idx][mine], np.zeros(m, np.int64)])[order])
        return found, np.bincount(found.owner, minlength=self.W).astype(np.int64)

    @staticmethod
    def bag_keys(requester, place):
        """One int64 a (requester, place), ordered as the pairs are: what the relay groups partials by."""
        return requester * (int(place.max(initial=0)) + 1) + place

    # -- the requester, stage 2 -----------------------------------------------------------------------------------
    def arriving(self, g, route, places):
        """``(place, length, counts [W])`` of the rows stage 2 brings this rank for group ``g``: one a (host, bag)
        with keys on that host, in relay order then place order, with the lengths of its sub-bags there added."""
        idx = route.group_index[g]
        keyed = self.keyed[route.stream[idx]]
        host, place, length = route.dest[idx][keyed] // self.L, places[idx][keyed], route.lengths[idx][keyed]
        key = host * (int(place.max(initial=0)) + 1) + place
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        relay = self.relay(self.me, host[first] * self.L)
        return place[first], np.bincount(inverse, weights=length, minlength=uniq.size).astype(np.int64), \
            np.bincount(relay, minlength=self.W).astype(np.int64)
