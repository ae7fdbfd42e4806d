"""Streaming reader of Parquet files (through pyarrow) with a :class:`~gpuemb.io.schema.Schema`.

The role of :class:`~gpuemb.io.reader.TextReader` for Parquet: it yields a :class:`~gpuemb.io.batch.Batch` of
the good rows of each record batch, reading one row group at a time (``ParquetFile.iter_batches`` over that group,
only the columns the schema reads, ``batch_rows`` rows at a time), so a file is never read whole. List columns
become the batch's :class:`~gpuemb.io.bags.Bags`; how each type is read is in :mod:`gpuemb.io.arrow_columns`.

A bad row (a label that is null, not a number, or not 0 or 1 (see ``ReadOptions.soft_labels``), a bag over
``max_bag`` keys, text that its column cannot read, an integer outside int64's range) is skipped and counted in
``reader.report``, the first few warned about as ``file: row group G, row R (file row F)``, all counted from 0
as pyarrow counts (``ParquetFile.read_row_group(G)``, then row R of it); with ``strict=True`` the first raises
:class:`~gpuemb.io.errors.BadLineError`. A file that is not Parquet, is truncated, or lacks a column
of the schema (or has it with a type that does not fit) is one DataError naming the file.
"""
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpuemb.io.arrow_columns import LONG_BAG, REASONS, bag_ids, dense_values, label_values, token_ids
from gpuemb.io.bags import JAGGED, Bags
from gpuemb.io.batch import Batch
from gpuemb.io.errors import DataError, ParseReport
from gpuemb.io.parquet_schema import check_fields, one_line, open_parquet
from gpuemb.io.reader import ReadOptions


@dataclass(frozen=True)
class BadRow:
    """One bad row of a Parquet file: its row group, its row in the group and in the file (from 0), and why."""
    path: str
    group: int
    row: int
    file_row: int
    reason: str
    unit = "row"  # what io.errors calls it in messages

    def __str__(self):
        return f"{self.path}: row group {self.group}, row {self.row} (file row {self.file_row}): {self.reason}"


class ParquetReader:
    """Iterate over the good rows of the Parquet files ``paths`` as Batches, one per record batch of at most
    ``batch_rows`` rows; ``report`` counts what was skipped (pass one to share it, as the converter does).
    ``options``: the text reader's ReadOptions (dense_log1p, soft_labels, strict, max_reported; block_bytes is not
    used)."""

    def __init__(self, paths, schema, options=ReadOptions(), report=None, max_bag=None, batch_rows=1 << 16):
        self.paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
        if not self.paths:
            raise DataError("no input files were given; pass at least one path")
        if max_bag is not None and max_bag < 0:
            raise ValueError(f"max_bag={max_bag} must be >= 0, or None for no cap")
        self.schema, self.options = schema.validate(), options.validate()
        self.max_bag, self.batch_rows = max_bag, batch_rows
        self.report = report if report is not None else ParseReport(max_reported=options.max_reported)
        self.report.unit = "row"
        # (column, role, index in its output): label and dense slots, and sparse features counted over all of
        # them (the hashing slot, as the text reader counts it), fixed and jagged ones also apart
        self.plan, seen = [], {"label": 0, "dense": 0, "categorical": 0, "fixed": 0, "jagged": 0}
        for c in schema.columns:
            if c.role == "ignore":
                continue
            part = ("jagged" if c.hotness == JAGGED else "fixed") if c.role == "categorical" else c.role
            self.plan.append((c, seen[c.role], seen[part]))
            seen[c.role] += 1
            seen[part] += c.role == "categorical"
        self.widths = seen["label"], seen["dense"], seen["fixed"], seen["jagged"]

    def __iter__(self):
        for path in self.paths:
            yield from self._read_file(path)

    def _read_file(self, path):
        with open_parquet(path) as f:
            check_fields(path, f.schema_arrow, self.schema)
            file_row = 0
            for group in range(f.num_row_groups):
                row = 0
                for records in self._record_batches(f, path, group):
                    batch = self._convert(records, path, group, row, file_row + row)
                    row += records.num_rows
                    if batch.rows:
                        yield batch
                file_row += row

    def _record_batches(self, f, path, group):
        """The record batches of row group ``group``; pyarrow's errors on a damaged group become a DataError."""
        names = [c.name for c, _, _ in self.plan]
        batches = f.iter_batches(self.batch_rows, row_groups=[group], columns=names, use_threads=False)
        while True:
            try:
                records = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as e:
                raise DataError(f"{path}: row group {group} cannot be read ({one_line(e)}); the file is truncated "
                                "or corrupt, so write or copy it again") from None
            yield records

    def _convert(self, records, path, group, row0, file_row0):
        n = records.num_rows
        T, D, S, J = self.widths
        label, dense = np.empty((n, T), np.float32), np.empty((n, D), np.float32)
        sparse, lengths, keys = np.empty((n, S), np.int64), np.empty((n, J), np.int64), []
        reason, culprit = np.zeros(n, np.int8), np.zeros(n, np.int64)
        for k, (column, slot, part) in enumerate(self.plan):
            arr = records.column(column.name)
            if column.role == "label":
                label[:, slot], codes = label_values(arr, self.options.soft_labels)
            elif column.role == "dense":
                dense[:, slot], codes = dense_values(arr, self.options.dense_log1p)
            elif column.hotness == JAGGED:
                lengths[:, part], ids, codes = bag_ids(arr, slot, column.kind, self.max_bag)
                keys.append(ids)
            else:
                sparse[:, part], codes = token_ids(arr, slot, column.kind)
            first = (codes != 0) & (reason == 0)  # a row's first bad column is the one reported
            reason[first], culprit[first] = codes[first], k
        batch = Batch(label[:, 0] if T == 1 else label, dense, sparse,
                      Bags(lengths.astype(np.int32), _row_major(lengths, keys)) if J else None)
        bad = np.flatnonzero(reason)
        if bad.size:
            self._report(records, bad, reason, culprit, (path, group, row0, file_row0))
            batch = batch.take(reason == 0)
        self.report.rows += batch.rows
        return batch

    def _report(self, records, bad, reason, culprit, where):
        path, group, row0, file_row0 = where
        detailed = 1 if self.options.strict else max(self.report.max_reported - len(self.report.first_bad), 0)
        for i in bad[:detailed]:
            text = self._describe(records, int(i), reason[i], self.plan[culprit[i]][0].name)
            self.report.add_bad(BadRow(path, group, row0 + int(i), file_row0 + int(i), text), REASONS[reason[i]],
                                self.options.strict)
        codes, counts = np.unique(reason[bad[detailed:]], return_counts=True)
        self.report.count_bad({REASONS[c]: int(n) for c, n in zip(codes, counts)})

    def _describe(self, records, i, code, name):
        value = records.column(name)[i].as_py()
        if code == LONG_BAG:
            keys = sum(v is not None for v in value)
            return (f"column {name!r}: a bag of {keys} keys, more than max_bag={self.max_bag}; raise the cap "
                    "(--max-bag), or truncate the bag when the data is made")
        if value is None:
            return f"column {name!r}: {REASONS[code]}"
        text = repr(value)
        return f"column {name!r}: {REASONS[code]}: {text if len(text) <= 40 else text[:37] + '...'}"


def _row_major(lengths, parts):
    """The keys of J features' bags, each given feature after feature in ``parts`` (row order within each), laid
    out row after row (row 0's bag of feature 0, of feature 1, ..., then row 1's), as :class:`Bags` holds them."""
    if len(parts) == 1:
        return parts[0]
    flat = lengths.ravel()
    starts = (np.cumsum(flat) - flat).reshape(lengths.shape)  # where each (row, feature) bag goes
    out = np.empty(int(flat.sum()), np.int64)
    for j, keys in enumerate(parts):
        own = np.cumsum(lengths[:, j]) - lengths[:, j]  # where each row's bag starts in parts[j]
        out[np.repeat(starts[:, j] - own, lengths[:, j]) + np.arange(keys.size)] = keys
    return out
