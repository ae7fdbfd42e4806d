"""The batch loader: fixed-size batches from shards or the synthetic source, prepared in a background thread.

A source (:class:`~gpuemb.io.shards.ShardSource`, :class:`~gpuemb.io.synthetic.SyntheticSource`, or anything
with ``n_rows``, ``block_sizes`` and ``read_block(i) -> Batch``) is a list of blocks, each read whole (for
shards a block is one HDF5 chunk, so reads are never h5py fancy indexing). Each epoch
has one order of all rows, the same on every rank:

1. the blocks are permuted (seeded by ``(seed, epoch)``) and grouped into windows of ``shuffle_window`` blocks;
2. the rows of each window are permuted (seeded by ``(seed, epoch, window)``): the block shuffle.

The global batches are consecutive runs of ``batch_size`` rows of that order, and rank r of W takes rows
``[r n / W, (r + 1) n / W)`` of each batch of n rows (:func:`rank_part`), so W ranks together see the batches of
one process. A rank reads only the blocks that hold rows of its parts, and makes only those rows where the source
can make rows alone (``read_rows(i, rows)``: synthetic data); so with shuffled shards, whose every batch draws on
every block of its window, it still reads each block, but it stages only its own rows. The position in the
epoch's order is the exact resume point, the global batches' whatever the world size: ``state_dict()`` holds
(epoch, position), and a loader given it, of any rank and world size, yields exactly the batches an uninterrupted
run would have yielded next. Evaluation, which every rank runs together, caps the rows (``max_rows``) and pads
each short batch (``pad_to``), so that every rank has a part of every batch.

Batches are gathered into one page-locked staging buffer (``batch.Staging``: label, dense and sparse side by
side) and copied to the device in one transfer on a side stream (``backend.new_stream``), which the producer
thread waits for before handing the batch over. On the
CPU the same code runs, with plain arrays and no-op streams, and the batch is the staging buffer itself.
"""
import time
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd import backend
from gpuemb.io.bags import feature_major
from gpuemb.io.batch import Batch, Staging
from gpuemb.io.jagged import JaggedFeatures
from gpuemb.io.prefetch import Prefetcher


def rank_part(n, rank, world_size):
    """Rows ``[lo, hi)`` of a global batch of ``n`` rows (an int or an array of them) that rank ``rank`` of
    ``world_size`` trains on: the ranks' parts are contiguous, in rank order, and differ by at most one row."""
    return rank * n // world_size, (rank + 1) * n // world_size


@dataclass(frozen=True)
class LoaderConfig:
    """Batching, shuffling, prefetch depth and this process's rank."""
    batch_size: int  # the global batch: rank r of W yields its rank_part of each
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = True  # drop the last partial batch of an epoch, else yield it short
    prefetch: int = 4  # batches kept ready by the background thread
    shuffle_window: int = 8  # blocks whose rows are mixed together
    rank: int = 0
    world_size: int = 1
    max_bag: int = None  # the most keys a jagged feature's bag may hold; a longer one stops the run, named
    # Evaluation's two: the epoch's first max_rows rows only (its last batch cut short), and each global batch
    # shorter than pad_to rows padded to it by repeating its last row before the ranks take their parts, so that
    # every rank has rows of every batch, as a forward that is collective over the ranks needs
    max_rows: int = None
    pad_to: int = 0

    def validate(self):
        if self.batch_size < 1 or self.prefetch < 1 or self.shuffle_window < 1:
            raise ValueError(f"LoaderConfig: batch_size={self.batch_size}, prefetch={self.prefetch} and "
                             f"shuffle_window={self.shuffle_window} must be >= 1")
        if self.max_rows is not None and self.max_rows < 0 or self.pad_to < 0:
            raise ValueError(f"LoaderConfig: max_rows={self.max_rows} and pad_to={self.pad_to} must be >= 0")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"LoaderConfig: rank={self.rank} must be in [0, world_size={self.world_size})")
        return self


# what must match for a resume; the rank and world size need not: the position is the global batches'
_RESUME_KEYS = ("seed", "shuffle", "shuffle_window")


class Loader:
    """Iterate for one epoch of batches (the rest of it, after a resume); the next iteration is the next epoch."""

    def __init__(self, source, config):
        self.source, self.config = source, config.validate()
        self.epoch, self.position = 0, 0
        self.rows, self.batches, self.seconds, self.stalls, self.stall_s = 0, 0, 0.0, 0, 0.0
        self.blocks_read, self.rows_read, self.bytes_read = 0, 0, 0  # counted by the prefetch thread
        self._device, self._stream = backend.current_device(), backend.new_stream()  # the rank's GPU, for the thread

    def __len__(self):
        """Batches in a whole epoch of this rank."""
        return self._parts(0)[0].size

    def __iter__(self):
        prefetcher = Prefetcher(self._produce(self.epoch, self.position), self.config.prefetch)
        start = time.perf_counter()
        try:
            for batch, end in prefetcher:
                self.position = end
                self.rows += batch.rows
                self.batches += 1
                yield batch
            self.epoch, self.position = self.epoch + 1, 0
        finally:
            self.seconds += time.perf_counter() - start
            self.stalls += prefetcher.stalls
            self.stall_s += prefetcher.stall_s

    def stats(self):
        """Rows yielded and rows/s while iterating; the stalls: the times the consumer found no batch ready; and
        what was read from the source to make them (the batches prefetched ahead included): blocks, rows read
        or made, and their bytes as read."""
        return {"rows": self.rows, "batches": self.batches, "rows_per_s": self.rows / max(self.seconds, 1e-9),
                "stalls": self.stalls, "stall_s": self.stall_s, "blocks_read": self.blocks_read,
                "rows_read": self.rows_read, "bytes_read": self.bytes_read}

    def state_dict(self):
        """The exact position to resume from: the epoch, and the rows of its order in the global batches yielded."""
        c = self.config
        return {"epoch": self.epoch, "position": self.position, "n_rows": self.source.n_rows,
                **{k: getattr(c, k) for k in _RESUME_KEYS}}

    def load_state_dict(self, state):
        """Continue from ``state``; the data and the order settings must be those it was saved with."""
        mine = self.state_dict()
        for k in ("n_rows",) + _RESUME_KEYS:
            if state[k] != mine[k]:
                raise ValueError(f"Loader.load_state_dict: {k} was {state[k]!r} when saved and is {mine[k]!r} "
                                 "now; an exact resume needs the same data and order settings")
        if not 0 <= state["position"] <= self.source.n_rows:
            raise ValueError(f"Loader.load_state_dict: position {state['position']} is outside the epoch's "
                             f"{self.source.n_rows} rows")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _windows(self, epoch):
        """(blocks of each window, first row of each window in the epoch's order)."""
        c, sizes = self.config, self.source.block_sizes
        order = (np.random.default_rng([c.seed, epoch]).permutation(sizes.size) if c.shuffle
                 else np.arange(sizes.size))
        windows = [order[i:i + c.shuffle_window] for i in range(0, order.size, c.shuffle_window)]
        starts = np.concatenate([[0], np.cumsum([sizes[w].sum() for w in windows])])
        return windows, starts

    def _parts(self, position):
        """(first, end, padding) in the epoch's order of this rank's part of each global batch from ``position``,
        and the position after each batch: rows [first, end) and ``padding`` copies of the row before ``end``. A
        last short batch of fewer rows than ranks leaves some ranks no part of it, unless ``pad_to`` pads it."""
        c, n = self.config, self.source.n_rows
        n = n if c.max_rows is None else min(n, c.max_rows)
        first = np.arange(position, n, c.batch_size)
        sizes = np.minimum(n - first, c.batch_size)
        if c.drop_last:
            first, sizes = first[sizes == c.batch_size], sizes[sizes == c.batch_size]
        lo, hi = rank_part(np.maximum(sizes, c.pad_to), c.rank, c.world_size)
        some = hi > lo
        # the padded rows past a batch's last are copies of it: a part that starts there reads that row alone
        start, end = np.minimum(lo, sizes - 1), np.minimum(hi, sizes)
        end = np.maximum(end, start + 1)
        pad = (hi - lo) - (end - start)
        return (first + start)[some], (first + end)[some], pad[some], (first + sizes)[some]

    def _produce(self, epoch, position):
        """Yield (device batch, position after it): this rank's part of each global batch from ``position``."""
        c = self.config
        lo, hi, pad, ends = self._parts(position)
        windows, starts = self._windows(epoch)
        k, pending, filled = 0, [], 0  # the part being assembled, its pieces (rows, row indices) and their rows
        for w in range(len(windows)):
            if k == lo.size:
                break
            # the pieces of this rank's parts that fall in window w; none: the window is not read at all
            a, b = starts[w], starts[w + 1]
            pieces = [(j, max(lo[j], a), min(hi[j], b)) for j in range(k, np.searchsorted(lo, b))]
            if not pieces:
                continue
            wanted = np.concatenate([np.arange(p, q) for _, p, q in pieces]) - a
            if c.shuffle:
                wanted = np.random.default_rng([c.seed, epoch, w]).permutation(b - a)[wanted]
            rows, at = self._read(windows[w], wanted)
            done = 0
            for j, p, q in pieces:
                pending.append((rows, at[done:done + q - p]))
                filled, done = filled + q - p, done + q - p
                if q == hi[j]:
                    if pad[j]:
                        last = pending[-1]
                        pending.append((last[0], np.repeat(last[1][-1:], pad[j])))
                        filled += int(pad[j])
                    yield self._stage(pending, filled), int(ends[j])
                    k, pending, filled = j + 1, [], 0

    def _read(self, blocks, wanted):
        """(a Batch, where each of ``wanted`` is in it): the rows ``wanted`` of ``blocks`` side by side, from only
        the blocks that hold some of them."""
        first = np.concatenate([[0], np.cumsum(self.source.block_sizes[blocks])])
        block = np.searchsorted(first, wanted, side="right") - 1
        parts, at, n = [], np.empty(wanted.size, np.int64), 0
        for j in np.unique(block):
            mine = np.flatnonzero(block == j)
            part, where = self._block_rows(int(blocks[j]), wanted[mine] - first[j])
            parts.append(part)
            at[mine] = n + where
            n += part.rows
        return Batch.concat(parts), at

    def _block_rows(self, i, rows):
        """(a Batch holding rows ``rows`` of block ``i``, where each of them is in it): those rows alone where the
        source makes rows on their own (synthetic), else the whole block, read and checked as one chunk."""
        read_rows = getattr(self.source, "read_rows", None)
        got, where = (read_rows(i, rows), np.arange(rows.size)) if read_rows else (self.source.read_block(i), rows)
        self.blocks_read += 1
        self.rows_read += got.rows
        self.bytes_read += sum(a.nbytes for a in got.arrays()) + (
            got.bags.lengths.nbytes + got.bags.values.nbytes if got.bags is not None else 0)
        return got, where

    def _stage(self, pieces, n):
        """Gather the pieces into one pinned buffer, copy it to the device in one transfer, and wait for the copy."""
        if pieces[0][0].bags is not None:
            return self._stage_jagged(pieces, n)
        staging = Staging(pieces[0][0], n)
        host = staging.arrays
        k = 0
        for rows, idx in pieces:
            for dst, src in zip(host, rows.arrays()):
                np.take(src, idx, axis=0, out=dst[k:k + idx.size])
            k += idx.size
        return Batch(*self._upload(staging))

    def _stage_jagged(self, pieces, n):
        """A batch with jagged features: its rows gathered, its sparse features made the model's feature-major
        ``JaggedFeatures`` (each bag checked against ``max_bag``), and copied to the device in one transfer."""
        host = Batch.concat([rows.take(idx) for rows, idx in pieces])
        layout = self.source.layout
        values, lengths = feature_major(layout.hotness, host.sparse, host.bags)
        bags = JaggedFeatures.from_lengths(layout.sparse_names, values, lengths, max_bag=self.config.max_bag)
        label, dense, values, offsets = self._upload(Staging.holding([host.label, host.dense, bags.values,
                                                                      bags.offsets]))
        return Batch(label, dense, JaggedFeatures(bags.names, values, offsets, None, n))

    def _upload(self, staging):
        # This runs in the prefetch thread, which starts on GPU 0 (the current device is per thread): the copy goes
        # to the rank's GPU, on its stream, which CuPy refuses to enter from another device.
        with self._device, self._stream:
            arrays = staging.upload()
        self._stream.synchronize()
        return arrays
