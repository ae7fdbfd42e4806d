"""Writing a bundle's ``tables.h5`` a chunk at a time: a table's rows are read from their source (a checkpoint's
snapshot, or a table in memory) chunk by chunk and each chunk is written at its keys' places in sorted order, so
an export holds a table's keys and one chunk of rows in memory, never all of its rows.

A source is ``(keys(), chunks())``: every key of the table, and ``(keys [n], weights [n, D])`` pieces that hold
each key once. The keys are needed whole, once, to sort them: the bundle reads a key's row by a binary search of
its sorted keys.
"""
from typing import Callable, NamedTuple

import numpy as np

from .rows import datasets, encode

DTYPES = {"weights": {"fp32": np.float32, "fp16": np.float16}, "codes": np.uint8, "scale": np.float32,
          "bias": np.float32}


class RowSource(NamedTuple):
    """Where table ``name``'s rows are read from: ``keys()`` (an iterable of key arrays) and ``chunks()`` (of
    ``(keys, weights [n, dim])``), each callable once or more."""
    name: str
    dim: int
    keys: Callable
    chunks: Callable


def table_source(table):
    """The rows of ``table``, an ``EmbeddingTable`` in memory."""
    cols = table.format.layout["weights"]
    return RowSource(table.config.name, table.dim, lambda: (k for k, _, _ in table.export()),
                     lambda: ((k, r[:, cols]) for k, r, _ in table.export()))


def snapshot_source(part, dim):
    """The rows of ``part``, a table of a snapshot file (``read_snapshot(path).tables[name]``); its weights are
    its rows' first ``dim`` columns (a snapshot's layout starts with them)."""
    return RowSource(part.name, dim, lambda: [part.keys()], lambda: ((k, r[:, :dim]) for k, r, _ in part.chunks()))


def write_table(group, source, rows):
    """Table ``source``'s keys (sorted) and weights, stored as ``rows``, into the h5py ``group``; returns its
    number of keys."""
    parts = list(source.keys())
    keys = np.sort(np.concatenate(parts) if parts else np.zeros(0, np.int64)).astype(np.int64)
    if keys.size > 1 and (keys[1:] == keys[:-1]).any():
        raise ValueError(f"export: table {source.name!r} holds key {int(keys[1:][keys[1:] == keys[:-1]][0])} twice; "
                         "the checkpoint is corrupt, use another one")
    group.create_dataset("keys", data=keys)
    n, D = keys.size, source.dim
    out = {d: group.create_dataset(d, (n, D) if d in ("weights", "codes") else (n,), _dtype(d, rows))
           for d in datasets(rows)}
    written = 0
    for k, w in source.chunks():
        if not k.size:
            continue
        w = np.asarray(w, np.float32)
        if w.shape != (k.size, D) or not np.isfinite(w).all():
            raise ValueError(f"export: table {source.name!r} holds rows with NaN or inf, or not of dim {D}; export "
                             "a checkpoint from before the run diverged")
        at = np.searchsorted(keys, k)
        order = np.argsort(at, kind="stable")
        at = at[order]
        where = slice(int(at[0]), int(at[-1]) + 1) if at[-1] - at[0] + 1 == at.size else at  # a sorted chunk: one slice
        for d, data in encode(w[order], rows).items():
            out[d][where] = data
        written += k.size
    if written != n:
        raise ValueError(f"export: table {source.name!r} has {n} keys but {written} rows; the checkpoint is corrupt, "
                         "use another one")
    return n


def _dtype(dataset, rows):
    t = DTYPES[dataset]
    return t[rows] if isinstance(t, dict) else t
