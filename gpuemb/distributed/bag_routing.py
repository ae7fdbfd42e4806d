"""Where each bag goes and where each pooled row comes back: the bookkeeping of the all-to-all for pooled features.

The entries of the exchange are bags, not keys. A bag of a table- or column-wise stream is one entry, to the
stream's rank. A bag of a keyed stream (row-wise, table-row-wise, a grid's column range) is one entry to each rank
that owns a key of it: its sub-bag of the keys
that rank owns (never empty; a bag with no key sends nothing), so each owner returns one partial row per sub-bag
it got and the requester combines a bag's partials (``row_partials.py``). Entries are sorted as ``Route`` sorts
keys: by destination, then stream, batch order within. No bag index travels: the partials come back in the order
the sub-bags went, and the requester knows the bag (``pos``) of each.

What travels to each peer: one int64 block of its entries' lengths, then their keys (in entry order), then, from a
rank with weights, the keys' weights (float32, two to an int64 word: ``pack_weights``). A peer knows how many keys
each block holds from its lengths, and whether weights follow from the head of counts that went before, so the
weights need no all-to-all of their own; where any rank sent weights, the keys of a rank that sent none weigh 1.
"""
import numpy as np

from gpuemb.io.bags import concat_ranges

from .routing import Route


class BagRoute(Route):
    """The requester's side of a pooled step, from ``LocalBags``: as ``Route``, with entries that are (sub-)bags.
    Also: ``lengths`` of each entry and ``keys`` (``weights``, or None) in send order, ``key_counts [W]``."""

    def __init__(self, bags, table_of, streams, groups, world_size):
        W = world_size
        pos, sid, dest, lengths, at = [], [], [], [], []
        for i, st in enumerate(streams):
            p, bag = bags.sample_major(np.flatnonzero(np.asarray(table_of) == st.table))
            index, n = bags.keys_of(bag)
            if st.keyed:  # a sub-bag to each owner of a key of the bag, owner-major, keys in bag order
                m = p.size
                entry = np.repeat(np.arange(m), n) + m * st.owners(bags.values[index])
                index, n = index[np.argsort(entry, kind="stable")], np.bincount(entry, minlength=W * m)
                held = n > 0
                p, d, n = np.tile(p, W)[held], np.repeat(np.arange(W), m)[held], n[held]
            else:
                d = np.full(p.size, st.rank)
            dest.append(d)
            pos.append(p)
            sid.append(np.full(p.size, i, np.int64))
            lengths.append(n)
            at.append(index)
        order = self._sort(pos, sid, dest, groups, W)
        n = np.concatenate(lengths).astype(np.int64) if streams else np.zeros(0, np.int64)
        at = np.concatenate(at) if streams else np.zeros(0, np.int64)
        self.lengths = n[order]
        at = at[concat_ranges((np.cumsum(n) - n)[order], self.lengths)]
        self.keys = np.ascontiguousarray(bags.values[at])
        self.weights = None if bags.weights is None else bags.weights[at]
        self.key_counts = np.bincount(self.dest, weights=self.lengths, minlength=W).astype(np.int64)


def _heads(head_counts, counts):
    """Whether each element of blocks of ``counts`` is among the first ``head_counts`` of its block."""
    total = int(np.sum(counts))
    starts = np.cumsum(counts) - counts
    return np.arange(total) - np.repeat(starts, counts) < np.repeat(head_counts, counts)


def pack(lengths, keys, entry_counts, key_counts):
    """One int64 block a peer: its entries' lengths, then their keys."""
    return interleave(lengths, entry_counts, keys, key_counts)


def interleave(a, a_counts, b, b_counts):
    """One block a peer: its ``a_counts[p]`` elements of ``a``, then its ``b_counts[p]`` of ``b``."""
    out = np.empty(a.size + b.size, np.result_type(a, b))
    head = _heads(a_counts, a_counts + b_counts)
    out[head], out[~head] = a, b
    return out


def split_tails(received, recv_counts, tail_counts):
    """``(heads, tails)``: each peer's block of ``received`` (``recv_counts [W]``) split before its last
    ``tail_counts[p]`` elements, as ``interleave`` joined them."""
    head = _heads(recv_counts - tail_counts, recv_counts)
    return received[head], received[~head]


def pack_weights(weights, key_counts):
    """``(words, sizes [W])``: the float32 ``weights`` of each peer's ``key_counts[p]`` keys (in send order), two to
    an int64 word, the last padded, so that they travel in the int64 block of the keys."""
    ends = np.cumsum(key_counts)
    sizes = (np.asarray(key_counts) + 1) // 2
    out = np.zeros(int(sizes.sum()) * 2, np.float32)
    at = np.repeat(2 * (np.cumsum(sizes) - sizes) - (ends - key_counts), key_counts)
    out[np.arange(weights.size) + at] = weights
    return out.view(np.int64), sizes


class ArrivedBags:
    """The owner's side: the blocks that ``pack`` made on every peer, received peer by peer (``recv_counts [W]``
    elements, of which the first ``entry_counts [W]`` are lengths), each ending with its keys' weights where
    ``weighted[p]`` (``pack_weights``). ``weights``: per key, 1 for a peer that sent none; None where none did."""

    def __init__(self, payload, recv_counts, entry_counts, weighted=None):
        head = _heads(entry_counts, recv_counts)
        self.weights = None
        if weighted is not None and np.any(weighted):
            peer = np.repeat(np.arange(len(entry_counts)), entry_counts)
            keys = np.bincount(peer, weights=payload[head], minlength=len(entry_counts)).astype(np.int64)
            words = np.where(weighted, (keys + 1) // 2, 0)
            payload, packed = split_tails(payload, recv_counts, words)
            recv_counts = np.asarray(recv_counts) - words
            head = _heads(entry_counts, recv_counts)
            floats = packed.view(np.float32)
            starts = 2 * (np.cumsum(words) - words)
            self.weights = np.concatenate(
                [floats[starts[p]:starts[p] + keys[p]] if weighted[p] else np.ones(keys[p], np.float32)
                 for p in range(len(keys))])
        self.lengths, self.keys = payload[head], payload[~head]
        self.starts = np.cumsum(self.lengths) - self.lengths

    def bags(self, entries):
        """``(keys, offsets [n + 1], weights or None)`` of the received ``entries``, in that order."""
        n = self.lengths[entries]
        at = concat_ranges(self.starts[entries], n)
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        return self.keys[at], offsets, None if self.weights is None else self.weights[at]
