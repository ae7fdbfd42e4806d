"""The batch loader: fixed-size batches from shards or the synthetic source, prepared in a background thread.

A source (:class:`~gpuemb.io.shards.ShardSource`, :class:`~gpuemb.io.synthetic.SyntheticSource`, or anything
with ``n_rows``, ``block_sizes`` and ``read_block(i) -> Batch``) is a list of blocks, each read whole (for
shards a block is one HDF5 chunk, so reads are never h5py fancy indexing). Each epoch
has one order of all rows, the same on every rank:

1. the blocks are permuted (seeded by ``(seed, epoch)``) and grouped into windows of ``shuffle_window`` blocks;
2. the rows of each window are permuted (seeded by ``(seed, epoch, window)``): the block shuffle.

Rank r of n takes rows ``[r N / n, (r + 1) N / n)`` of that order, so the ranks' parts are disjoint, cover every
row, and differ in size by at most one row. The position within the rank's part is the exact resume point:
``state_dict()`` holds (epoch, position), and a loader given it yields exactly the batches an uninterrupted run
would have yielded next.

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


@dataclass(frozen=True)
class LoaderConfig:
    """Batching, shuffling, prefetch depth and this process's rank."""
    batch_size: int
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = True  # drop the last partial batch of an epoch, else yield it short
    prefetch: int = 4  # batches kept ready by the background thread
    shuffle_window: int = 8  # blocks whose rows are mixed together
    rank: int = 0
    world_size: int = 1
    max_bag: int = None  # the most keys a jagged feature's bag may hold; a longer one stops the run, named

    def validate(self):
        if self.batch_size < 1 or self.prefetch < 1 or self.shuffle_window < 1:
            raise ValueError(f"LoaderConfig: batch_size={self.batch_size}, prefetch={self.prefetch} and "
                             f"shuffle_window={self.shuffle_window} must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"LoaderConfig: rank={self.rank} must be in [0, world_size={self.world_size})")
        return self


_RESUME_KEYS = ("seed", "shuffle", "shuffle_window", "rank", "world_size")


class Loader:
    """Iterate for one epoch of batches (the rest of it, after a resume); the next iteration is the next epoch."""

    def __init__(self, source, config):
        self.source, self.config = source, config.validate()
        n, r, w = source.n_rows, config.rank, config.world_size
        self.lo, self.hi = r * n // w, (r + 1) * n // w
        self.epoch, self.position = 0, 0
        self.rows, self.batches, self.seconds, self.stalls, self.stall_s = 0, 0, 0.0, 0, 0.0
        self._device, self._stream = backend.current_device(), backend.new_stream()  # the rank's GPU, for the thread

    def __len__(self):
        """Batches in a whole epoch of this rank."""
        rows, bs = self.hi - self.lo, self.config.batch_size
        return rows // bs if self.config.drop_last else -(-rows // bs)

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
        """Rows/s while iterating, and the stalls: the times the consumer found no batch ready."""
        return {"rows": self.rows, "batches": self.batches, "rows_per_s": self.rows / max(self.seconds, 1e-9),
                "stalls": self.stalls, "stall_s": self.stall_s}

    def state_dict(self):
        """The exact position to resume from: epoch and rows of this rank's part already yielded."""
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
        if not 0 <= state["position"] <= self.hi - self.lo:
            raise ValueError(f"Loader.load_state_dict: position {state['position']} is outside this rank's "
                             f"{self.hi - self.lo} rows")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _windows(self, epoch):
        """(blocks of each window, first row of each window in the epoch's order)."""
        c, sizes = self.config, self.source.block_sizes
        order = (np.random.default_rng([c.seed, epoch]).permutation(sizes.size) if c.shuffle
                 else np.arange(sizes.size))
        windows = [order[i:i + c.shuffle_window] for i in range(0, order.size, c.shuffle_window)]
        starts = np.concatenate([[0], np.cumsum([sizes[w].sum() for w in windows])])
        return windows, starts

    def _produce(self, epoch, position):
        """Yield (device batch, position after it) from ``position`` to the end of this rank's part."""
        c = self.config
        windows, starts = self._windows(epoch)
        at, end = self.lo + position, self.hi
        pending, filled = [], 0  # pieces (rows, row indices) of the batch being assembled
        for w in range(np.searchsorted(starts, at, side="right") - 1, len(windows)):
            if starts[w] >= end:
                break
            rows = Batch.concat([self.source.read_block(int(b)) for b in windows[w]])
            order = (np.random.default_rng([c.seed, epoch, w]).permutation(rows.rows) if c.shuffle
                     else np.arange(rows.rows))
            a, b = max(at, starts[w]) - starts[w], min(end, starts[w + 1]) - starts[w]
            while a < b:
                take = min(b - a, c.batch_size - filled)
                pending.append((rows, order[a:a + take]))
                filled, a, at = filled + take, a + take, at + take
                if filled == c.batch_size:
                    yield self._stage(pending, filled), at - self.lo
                    pending, filled = [], 0
        if filled and not c.drop_last:
            yield self._stage(pending, filled), at - self.lo

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
