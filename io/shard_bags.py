"""The jagged columns of a version 3 shard: how :mod:`gpuemb.io.shards` writes, checks and reads them.

======== ======= ============== ==========================================================================
dataset  dtype   shape          what
======== ======= ============== ==========================================================================
bag_lengths int32 ``[N, J]``    keys of each row's bag of each jagged feature, chunked ``(chunk_rows, J)``
bag_values  int64 ``[M]``       the keys, row after row (a row's bags feature after feature), M = lengths' sum
bag_starts  int64 ``[C + 1]``   the first value of each of the C chunks, and M: chunk k's rows hold
                                ``bag_values[bag_starts[k]:bag_starts[k + 1]]``
======== ======= ============== ==========================================================================

So a block (one chunk of rows) is two range reads, never a fancy index, and rows stay whole for the loader's
shuffle. Chunk k's row of the checksum table carries two more CRC32s: of its lengths and of its values. The
starts need no checksum of their own: a wrong start reads values whose count or CRC does not match.
"""
import numpy as np

from gpuemb.io import shard_attrs as attrs
from gpuemb.io.bags import Bags, check_bags
from gpuemb.io.errors import DataError, ShardError

DATASETS = ("bag_lengths", "bag_values")
VALUES_CHUNK = 1 << 16  # keys per HDF5 chunk of bag_values: 512 KiB, read whole by a block's range


class BagBuffer:
    """The jagged part of the chunk a ShardWriter is filling, and the value starts of the shard being written."""

    def __init__(self, names, chunk_rows):
        self.names = names
        self.lengths = np.zeros((chunk_rows, len(names)), np.int32)
        self.values, self.starts = [], [0]

    def add(self, bags, a, b, fill, where):
        """Rows ``a:b`` of ``bags`` at row ``fill`` of the chunk; ``where`` names the folder in errors."""
        part = bags.slice(a, b)
        check_bags(self.names, part.lengths, part.values, where)
        self.lengths[fill:fill + b - a] = part.lengths
        self.values.append(np.asarray(part.values, np.int64))

    def create(self, file, chunk_rows, compression):
        J = len(self.names)
        file.create_dataset("bag_lengths", shape=(0, J), maxshape=(None, J), dtype=np.int32,
                            chunks=(chunk_rows, max(J, 1)), compression=compression)
        file.create_dataset("bag_values", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(VALUES_CHUNK,),
                            compression=compression)
        self.starts = [0]

    def flush(self, file, n, k):
        """Write the chunk's ``k`` rows after row ``n``; returns its (lengths, values) for the checksum table."""
        lengths, values = self.lengths[:k], np.concatenate(self.values) if self.values else np.zeros(0, np.int64)
        ds = file["bag_lengths"]
        ds.resize(n + k, axis=0)
        if lengths.size:
            ds.write_direct(lengths, np.s_[0:k], np.s_[n:n + k])
        at = self.starts[-1]
        ds = file["bag_values"]
        ds.resize(at + values.size, axis=0)
        if values.size:
            ds.write_direct(values, np.s_[:], np.s_[at:at + values.size])
        self.starts.append(at + values.size)
        self.values = []
        return lengths, values

    def finish(self, file):
        file.create_dataset("bag_starts", data=np.array(self.starts, np.int64))


def read_starts(f, path, n_rows, chunk_rows, J, dataset):
    """``bag_starts`` of an open shard, with the shapes of the jagged datasets checked against the attributes;
    ``dataset(f, name, path)`` fetches a dataset or names it missing."""
    n_chunks = -(-n_rows // chunk_rows)
    for name, shape, dtype in (("bag_lengths", (n_rows, J), np.int32), ("bag_starts", (n_chunks + 1,), np.int64)):
        ds = dataset(f, name, path)
        if ds.shape != shape or ds.dtype != dtype:
            raise ShardError(f"{path}: dataset {name!r} is {ds.dtype} {ds.shape}, but the attributes say "
                             f"{np.dtype(dtype)} {shape}; the shard is truncated or corrupt, so {attrs.FIX}")
    starts = f["bag_starts"][()]
    values = dataset(f, "bag_values", path)
    if values.ndim != 1 or values.dtype != np.int64 or starts[0] != 0 or (np.diff(starts) < 0).any() \
            or starts[-1] != values.shape[0]:
        raise ShardError(f"{path}: datasets 'bag_starts' and 'bag_values' ({values.dtype} {values.shape}) do not "
                         f"fit each other; the shard is truncated or corrupt, so {attrs.FIX}")
    return starts


def read_block(f, starts, a, b, k):
    """The Bags of rows ``a:b``, chunk ``k``, as fresh arrays."""
    lengths = np.empty((b - a, f["bag_lengths"].shape[1]), np.int32)
    if lengths.size:
        f["bag_lengths"].read_direct(lengths, np.s_[a:b])
    values = np.empty(int(starts[k + 1] - starts[k]), np.int64)
    if values.size:
        f["bag_values"].read_direct(values, np.s_[int(starts[k]):int(starts[k + 1])])
    return Bags(lengths, values)


def check_block(bags, path, a, b, k):
    """A ShardError where a checksummed block's lengths do not add up to its values (a corrupt ``bag_starts``)."""
    try:
        check_bags([""] * bags.lengths.shape[1], bags.lengths, bags.values, path)
    except DataError:
        raise ShardError(f"{path}: chunk {k} (rows {a}:{b}): its bags' lengths add up to "
                         f"{int(bags.lengths.sum(dtype=np.int64))} keys, but 'bag_starts' gives it "
                         f"{bags.values.size}; the shard is corrupt, so {attrs.FIX}") from None
