"""The converter: raw text or Parquet files in, HDF5 shards out (the layout is in :mod:`gpuemb.io.shards`).

``convert(inputs, out_dir, schema, options)`` streams the inputs block by block. ``inputs`` is either

- a list of files, whose good rows are split into train/val/test by ``options.split`` ratios: each row goes to
  a split by a seeded hash of its index, so the split is the same on every run and needs no shuffle; or
- a dict of split name to files ("by file", e.g. the last Criteo day as test).

Shards go to ``out_dir/<split>/part-*.h5``, listed in ``out_dir/<split>/manifest.json`` once all are written
(:mod:`gpuemb.io.dataset_manifest`). With a frequency threshold, a first pass counts tokens over the training rows
only, so no id is kept because of how often it shows up in val or test. The threshold and the caps
apply to a jagged feature's keys (a Parquet list column) as to a scalar column's ids, per feature.
"""
import os
import time
from dataclasses import dataclass, field

import numpy as np

from gpuemb.io.errors import DataError, ParseReport
from gpuemb.io.formats import reader_for
from gpuemb.io.hashing import mix_array
from gpuemb.io.prefetch import Prefetcher
from gpuemb.io.reader import ReadOptions
from gpuemb.io.remap import IdRemap, TokenCounter
from gpuemb.io.output_folder import OutputFolder
from gpuemb.io.shards import ShardLayout, WriteOptions

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ConvertOptions:
    """What the converter does besides parsing: split, threshold, caps, and how it reads and writes."""
    split: tuple = (1.0, 0.0, 0.0)  # train/val/test ratios, used when inputs are a list of files
    seed: int = 0  # of the ratio split
    freq_threshold: int = 0  # tokens seen fewer times in train become one rare id per column; 0: off
    caps: int | tuple = 0  # ids modulo cap, one for all columns or one per column; 0: no cap
    read: ReadOptions = ReadOptions()
    write: WriteOptions = WriteOptions()
    max_bag: int | None = None  # most keys in a row's bag of a list column (Parquet); a longer one is a bad row

    def validate(self):
        if len(self.split) != 3 or min(self.split) < 0 or not np.isclose(sum(self.split), 1.0):
            raise ValueError(f"ConvertOptions.split={self.split}: give three ratios >= 0 (train, val, test) "
                             "that sum to 1")
        if self.freq_threshold < 0:
            raise ValueError(f"ConvertOptions.freq_threshold={self.freq_threshold} must be >= 0")
        if self.max_bag is not None and self.max_bag < 0:
            raise ValueError(f"ConvertOptions.max_bag={self.max_bag} must be >= 0, or None for no cap")
        self.read.validate()
        self.write.validate()
        return self


@dataclass
class ConvertReport:
    """Rows and shards per split, bad lines, and the speed of the run."""
    rows: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)
    parse: ParseReport = field(default_factory=ParseReport)
    seconds: float = 0.0

    @property
    def rows_per_s(self):
        return sum(self.rows.values()) / max(self.seconds, 1e-9)

    def __str__(self):
        per = ", ".join(f"{s}: {n}" for s, n in self.rows.items()) or "0"
        return f"{per} rows in {self.seconds:.2f} s ({self.rows_per_s:,.0f} rows/s); {self.parse.summary()}"


def _ratio_splits(first_row, n, ratios, seed):
    """The split index of rows ``first_row..first_row+n``: a seeded hash of the row index against the ratios."""
    u = mix_array(np.arange(first_row, first_row + n, dtype=np.uint64), seed) / float(1 << 63)
    return np.searchsorted(np.cumsum(ratios)[:-1], u, side="right")


def _split_batches(inputs, schema, options, report):
    """Yield (split index, batch) over all inputs; ratio-split blocks come as one (index array, batch)."""
    if isinstance(inputs, dict):
        for name, paths in inputs.items():
            for batch in reader_for(paths, schema, options.read, report, options.max_bag):
                yield SPLITS.index(name), batch
        return
    row = 0
    for batch in reader_for(inputs, schema, options.read, report, options.max_bag):
        yield _ratio_splits(row, batch.rows, options.split, options.seed), batch
        row += batch.rows


def _by_split(split, batch):
    """(split index, rows) pairs of one block."""
    if np.ndim(split) == 0:
        yield int(split), batch
        return
    counts = np.bincount(split, minlength=len(SPLITS))
    for s in np.flatnonzero(counts):
        yield int(s), batch if counts[s] == batch.rows else batch.take(split == s)


def count_tokens(inputs, schema, options):
    """Counts of each sparse id over the training rows of ``inputs`` (the threshold's first pass)."""
    counter = TokenCounter(len(schema.sparse_names))
    quiet = ParseReport(max_reported=0)
    for split, batch in _split_batches(inputs, schema, options, quiet):
        for s, part in _by_split(split, batch):
            if s == 0:
                counter.add(part, schema.sparse_hotness)
    return counter


def convert(inputs, out_dir, schema, options=ConvertOptions(), overwrite=False):
    """Convert ``inputs`` (a list of files, or a dict of split to files) to shards; return a ConvertReport.

    ``out_dir`` must hold no earlier conversion, unless ``overwrite``, which removes it first
    (:mod:`gpuemb.io.output_folder`)."""
    options.validate()
    schema.validate()
    if isinstance(inputs, dict) and set(inputs) - set(SPLITS):
        raise ValueError(f"inputs: unknown splits {sorted(set(inputs) - set(SPLITS))}; use {SPLITS}")
    with OutputFolder(out_dir, SPLITS, overwrite) as out:
        return _convert(inputs, out, schema, options)


def _convert(inputs, out, schema, options):
    start = time.perf_counter()
    frequent = None
    if options.freq_threshold:
        frequent = count_tokens(inputs, schema, options).frequent(options.freq_threshold)
    remap = IdRemap(len(schema.sparse_names), frequent, options.caps)
    meta = {"schema": schema.to_json(), "dense_transform": "log1p(max(x, 0))" if options.read.dense_log1p else
            "none", "hashing": "gpuemb.io.hashing v1", "freq_threshold": options.freq_threshold,
            "caps": options.caps, "max_bag": options.max_bag, "split_ratios": list(options.split),
            "split_seed": options.seed,
            "sources": {s: _listed(ps) for s, ps in inputs.items()} if isinstance(inputs, dict) else _listed(inputs)}
    report = ConvertReport(parse=ParseReport(max_reported=options.read.max_reported))
    writers = {}
    # Parsing runs in a second thread, so that it overlaps with remapping and writing here.
    for split, batch in Prefetcher(_split_batches(inputs, schema, options, report.parse), depth=2):
        remap(batch, schema.sparse_hotness)
        for s, part in _by_split(split, batch):
            if s not in writers:
                layout = ShardLayout(tuple(schema.label_names), tuple(schema.dense_names),
                                     tuple(schema.sparse_names), schema.sparse_hotness,
                                     meta=dict(meta, split=SPLITS[s]))
                writers[s] = out.shard_writer(SPLITS[s], layout, options.write)
            writers[s].append(part)
    for s in sorted(writers):
        report.paths[SPLITS[s]] = writers[s].close()
        report.rows[SPLITS[s]] = writers[s].rows
    _check_rows(inputs, report)  # before the manifests: a failed conversion's folders stay marked unfinished
    for s in sorted(writers):
        out.publish(SPLITS[s], writers[s])
    report.seconds = time.perf_counter() - start
    return report


def _listed(paths, most=100):
    """The paths for a shard's meta, the first ``most`` of them and a count of the rest: a shard's attributes
    must stay under HDF5's 64 KiB (see :func:`gpuemb.io.shard_attrs.put_text`)."""
    paths = [os.fspath(p) for p in paths]
    return paths if len(paths) <= most else paths[:most] + [f"... and {len(paths) - most} more"]


def _check_rows(inputs, report):
    """A DataError when the inputs gave no good rows, or a split named by file got none: there is nothing to train
    or evaluate on, and the bad lines say why."""
    empty = [s for s in inputs if not report.rows.get(s)] if isinstance(inputs, dict) else []
    if report.rows and not empty:
        return
    where = f"the {empty[0]} files {[os.fspath(p) for p in inputs[empty[0]]]}" if report.rows else "the inputs"
    raise DataError(f"{where} gave 0 good rows ({report.parse.summary()}); fix the lines reported, or check that "
                    "the files are in the format given")
