"""Streaming reader of delimited text files (plain or gzip) with a :class:`~gpuemb.io.schema.Schema`.

A file is read in blocks of whole lines (``block_bytes`` at a time), never whole, and each block is parsed by
:func:`gpuemb.io.textparse.parse_block` into a :class:`~gpuemb.io.batch.Batch` of its good rows. Bad lines (a
wrong field count, a field its column cannot read, a label other than 0 or 1: see ``ReadOptions``) are skipped
and counted in ``reader.report`` (a :class:`~gpuemb.io.errors.ParseReport`), the first few warned about
as file:line with the reason; with ``strict=True`` the first one raises :class:`~gpuemb.io.errors.BadLineError`.
"""
import gzip
import os
import zlib
from dataclasses import dataclass

import numpy as np

from gpuemb.io.batch import Batch
from gpuemb.io.errors import BadLine, DataError, ParseReport
from gpuemb.io.hashing import KINDS
from gpuemb.io.textparse import BAD_FIELDS, REASONS, ROLE_CODES, parse_block

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ReadOptions:
    """How text is read: block size, the dense transform, which labels are good, and what a bad line does."""
    block_bytes: int = 8 << 20
    dense_log1p: bool = True  # dense = log1p(max(x, 0)); False keeps x as it is
    strict: bool = False
    max_reported: int = 10
    # A label is a click, 0 or 1: anything else is a bad line, as the log loss would train on it without a word.
    # True takes soft labels (a click rate, a teacher's score): any value in [0, 1].
    soft_labels: bool = False

    def validate(self):
        if self.block_bytes < 1024:
            raise ValueError(f"ReadOptions.block_bytes={self.block_bytes} is too small; use at least 1024")
        if self.max_reported < 0:
            raise ValueError(f"ReadOptions.max_reported={self.max_reported} must be >= 0")
        if not isinstance(self.soft_labels, bool):
            raise ValueError(f"ReadOptions.soft_labels={self.soft_labels!r}; give True (labels in [0, 1]) or False "
                             "(0 or 1)")
        return self


def open_binary(path):
    """``path`` opened for binary reading, gunzipped where it starts with the gzip magic; clear errors if not."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file" + (" (it is a folder)" if os.path.isdir(path) else "")
                        + "; check the path")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty; it holds no rows to read")
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else open(path, "rb")


def read_chunk(f, n, path):
    """Up to ``n`` bytes of ``f``; a corrupt or truncated gzip stream becomes a DataError naming ``path``."""
    try:
        return f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot be read past this point ({type(e).__name__}: {e}); "
                        "the file is truncated or corrupt, so fetch or decompress it again") from None


def header_names(path, delimiter=","):
    """The column names in the first line of ``path``."""
    with open_binary(path) as f:
        line = read_chunk(f, 1 << 20, path).split(b"\n", 1)[0]
    return line.rstrip(b"\r").decode("utf-8", "replace").split(delimiter)


class _Plan:
    """The schema turned into the per-field arrays that parse_block takes."""

    def __init__(self, schema):
        self.schema = schema
        self.delim = ord(schema.delimiter)
        counters = {r: 0 for r in ROLE_CODES}
        self.roles = np.array([ROLE_CODES[c.role] for c in schema.columns], np.int8)
        self.kinds = np.array([KINDS.index(c.kind) for c in schema.columns], np.int8)
        self.slots = np.empty(len(schema.columns), np.int64)
        for f, c in enumerate(schema.columns):
            self.slots[f] = counters[c.role]
            counters[c.role] += 1
        labels = [c for c in schema.columns if c.role == "label"]
        tokens = [(c.positive or "").encode() for c in labels]
        self.pos_tok = np.frombuffer(b"".join(tokens) or b"\0", np.uint8)
        ends = np.cumsum([len(t) for t in tokens], dtype=np.int64)
        self.pos_off = np.stack([ends - [len(t) for t in tokens], ends], axis=1)
        self.pos_off[[c.positive is None for c in labels], 1] = -1
        self.width = (len(labels), counters["dense"], counters["categorical"])


class TextReader:
    """Iterate over the good rows of ``paths`` as Batches, one per block; ``report`` counts what was skipped.

    Pass ``report`` to count into an existing :class:`ParseReport` (the converter shares one across readers).
    """

    def __init__(self, paths, schema, options=ReadOptions(), report=None):
        self.paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
        if not self.paths:
            raise DataError("no input files were given; pass at least one path")
        self.schema = schema.validate()
        self.options = options.validate()
        self.plan = _Plan(schema)
        self.report = report if report is not None else ParseReport(max_reported=options.max_reported)

    def __iter__(self):
        for path in self.paths:
            yield from self._read_file(path)

    def _read_file(self, path):
        skip_header = self.schema.header
        line0, pending, lines_seen = 1, [], 0
        with open_binary(path) as f:
            while True:
                data = read_chunk(f, self.options.block_bytes, path)
                cut = data.rfind(b"\n") + 1 if data else len(data)
                if data and not cut:
                    # A line longer than a block: its pieces are joined once its end comes, not once a block.
                    pending.append(data)
                    continue
                block = b"".join(pending + [data[:cut]])
                pending = [data[cut:]]
                if block and not block.endswith(b"\n"):
                    block += b"\n"
                if skip_header and block:
                    first, block = block.split(b"\n", 1)
                    names = first.rstrip(b"\r").decode("utf-8", "replace").split(self.schema.delimiter)
                    self.schema.check_header(names, f"{path}:1")
                    skip_header, line0 = False, 2
                if block:
                    batch, n_lines = self._parse(block, path, line0)
                    line0 += n_lines
                    lines_seen += n_lines
                    if batch.rows:
                        yield batch
                if not data:
                    break
        if lines_seen == 0:
            raise DataError(f"{path}: has a header but no data lines" if self.schema.header
                            else f"{path}: holds no lines")

    def _parse(self, block, path, line0):
        p = self.plan
        buf = np.frombuffer(block, np.uint8)
        ends = np.flatnonzero(buf == 10)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        n = ends.size
        T, D, S = p.width
        label = np.empty((n, T), np.float32)
        dense = np.empty((n, D), np.float32)
        sparse = np.empty((n, S), np.int64)
        reason = np.zeros(n, np.int8)
        where = np.empty((n, 3), np.int64)
        parse_block(buf, starts, ends, p.delim, p.roles, p.kinds, p.slots, p.pos_tok, p.pos_off,
                    self.options.dense_log1p, self.options.soft_labels, label, dense, sparse, reason, where)
        bad = np.flatnonzero(reason)
        if bad.size:
            self._report(block, bad, reason, where, path, line0)
            good = reason == 0
            label, dense, sparse = label[good], dense[good], sparse[good]
        self.report.rows += label.shape[0]
        return Batch(label[:, 0] if T == 1 else label, dense, sparse), n

    def _report(self, block, bad, reason, where, path, line0):
        detailed = 1 if self.options.strict else max(self.report.max_reported - len(self.report.first_bad), 0)
        for i in bad[:detailed]:
            self.report.add_bad(BadLine(path, int(line0 + i), self._describe(block, reason[i], where[i])),
                                REASONS[reason[i]], self.options.strict)
        codes, counts = np.unique(reason[bad[detailed:]], return_counts=True)
        self.report.count_bad({REASONS[c]: int(n) for c, n in zip(codes, counts)})

    def _describe(self, block, code, where):
        if code == BAD_FIELDS:
            return f"expected {len(self.schema.columns)} fields, found {where[0]}"
        f, a, b = where
        text = block[a:min(b, a + 41)].decode("utf-8", "replace")
        text = text if len(text) <= 40 else text[:37] + "..."
        return f"field {f + 1} ({self.schema.columns[f].name}): {REASONS[code]}: {text!r}"
