"""The key skew of each table, measured from a sample of HDF5 shard rows (``gpuemb.io`` shards, as the converter
writes them): a table reads the sparse column of its own name (C1..C26 for Criteo), every id of a multi-hot one.
"""
import os

import numpy as np

from gpuemb.io.shards import ShardSource

from .skew import KeySkew


def sample_skews(data, tables, rows=100_000):
    """``{table name: KeySkew}`` from the first ``rows`` rows of the shards at ``data`` (a shard, a folder of
    shards), for ``tables`` (TableSpecs); ValueError in one line when a table has no column there."""
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"--sample {data}: rows={rows!r}; read at least 1 row")
    if not os.path.exists(data):  # else the shard reader says only that the path holds no shards
        raise ValueError(f"--sample {data}: no such file or folder; give a shard or a folder of shards")
    with ShardSource(data) as source:
        layout = source.layout
        names, hotness = layout.sparse_names, layout.hotness or (1,) * len(layout.sparse_names)
        missing = [t.name for t in tables if t.name not in names]
        if missing:
            raise ValueError(f"--sample {data}: no sparse column for table(s) {', '.join(missing[:5])}; its columns "
                             f"are {', '.join(names[:8])}{'...' if len(names) > 8 else ''}: name the tables after "
                             "them")
        jagged = [t.name for t in tables if hotness[names.index(t.name)] == 0]
        if jagged:
            raise ValueError(f"--sample {data}: table(s) {', '.join(jagged[:5])} are jagged (bags of any length), "
                             "which a sample does not read yet; give --skew instead")
        parts, got = [], 0
        for i in range(len(source.blocks)):
            if got >= rows:
                break
            sparse = source.read_block(i).sparse
            parts.append(sparse[:rows - got])
            got += parts[-1].shape[0]
    sparse = np.concatenate(parts)
    starts = np.concatenate([[0], np.cumsum(hotness)])
    return {t.name: KeySkew.from_sample(sparse[:, starts[names.index(t.name)]:starts[names.index(t.name) + 1]])
            for t in tables}
