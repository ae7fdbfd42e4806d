"""The snapshot format: keys, rows and config of embedding tables in one HDF5 file (docs/design.md, "Snapshots
and checkpoints"), and what a writer and a reader of it share.

A snapshot is plain HDF5 (docs/store.md, "Snapshot format") behind a seal (``seal.py``, from version 3): a 512-byte
user block holding the CRC32 and length of the rest of the file, checked with plain reads before h5py opens it, as
libhdf5 crashes or loops forever on some damaged metadata. File attributes: ``format`` = "gpuemb-snapshot",
``version`` = 3, ``id`` (a fresh hex id), ``kind`` ("full", "incremental" or "delta"), ``base`` (the id an
incremental applies on, "" for a full one), ``created`` (UTC, ISO 8601), ``meta`` (JSON) and ``attrs_crc32``, the
CRC32 of every other attribute of the file and its tables (``attrs_crc``). Each table is a group ``/tables/<name>``
with attributes ``config`` and ``layout`` (JSON: ``{part: [start, stop]}`` of the row columns, weights first),
``part_dtypes`` (JSON: ``{part: dtype}``, what each part's columns read as: a float16 table keeps float32 state as
pairs of 16-bit columns, see ``row_format.py``), ``extras`` (JSON: the names of the ``EXTRAS`` it holds),
``n_rows``, ``chunk_rows`` and ``has_steps``, and these datasets, all but ``checksums`` chunked by ``chunk_rows``
rows:

========= ============== ===================== ===================================================
dataset   dtype          shape                 holds
========= ============== ===================== ===================================================
keys      int64          ``[n_rows]``          the feature IDs, each once
rows      float32/16     ``[n_rows, width]``   ``[weights | optimizer state]`` per key
steps     int (as given) ``[n_rows]``          the per-row step counter, only when ``has_steps``
checksums uint32         ``[n_chunks, 3]``     CRC32 of chunk i's keys, rows and steps (0 without steps)
========= ============== ===================== ===================================================

Chunk i holds rows ``i * chunk_rows`` up to ``min((i + 1) * chunk_rows, n_rows)``, and its checksums cover
the bytes of exactly those rows in C order. The file is written beside its target as a temp file, synced, and
renamed over it, so the target is always a whole snapshot; a temp file left by a killed process is named
``.<name>.tmp-*``. Readers check the seal, then the structure when opening, and every chunk's checksums as they
read it.

Text attributes are fixed-length strings, held in the object header (version 3): h5py writes a str as a
variable-length string, kept in the file's global heap, which libhdf5 walks unchecked. Older versions still read:
1 (no attribute checksum), 2 (variable-length strings, no seal, no ``extras``: a table holds the extras whose
datasets or checksum datasets it has, and a delta's tables hold ``deleted``).
"""
import json
import zlib
from dataclasses import dataclass, field

import numpy as np

from gpuemb.store.errors import StoreError

FORMAT, VERSION = "gpuemb-snapshot", 3
READS = (1, 2, 3)  # the versions a reader takes: 1 lacks the attributes' checksum, 1 and 2 the seal
SEALED = (3,)  # the versions written with a seal, fixed-length texts and the ``extras`` attribute
PARTS = ("keys", "rows", "steps")
# Optional int64 datasets of a table beside its rows, each with ``<name>_checksums`` (CRC32 per ``chunk_rows``
# rows): ``pending`` [n, 3] (key, count, clock mod 2**23 when last counted; [n, 2] before that was kept), the
# admission counts of keys without a row; ``ticks`` [n, 2], (key, tick)
# of the last update of each key the snapshot holds a row of; ``deleted`` [n], a delta's keys deleted or evicted
# since its marker. A reader that predates them never sees them: they are new datasets. From version 3 the group's
# ``extras`` attribute names those it holds, and a reader requires each named one.
EXTRAS = ("pending", "ticks", "deleted")
KINDS = ("full", "incremental", "delta")
ATTRS_CRC = "attrs_crc32"
RESTORE = "restore from another snapshot or write this one again"  # what to do about a bad file
MAX_DEPTH = 32  # of the JSON in a file's attributes: configs are a few levels deep, and deeper ones crash parsers


class SnapshotError(StoreError):
    """A snapshot is missing, of another format, truncated or corrupt, or does not fit its chain."""


def parse_json(text, what, kind=dict):
    """``text`` parsed as JSON that must be a ``kind`` nested at most ``MAX_DEPTH`` deep; a ValueError says what is
    wrong with ``what`` (the file and the attribute)."""
    if not isinstance(text, str):
        raise ValueError(f"{what} is {type(text).__name__}, not JSON text")
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is JSON nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"{what} is not JSON ({e})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{what} is a JSON {type(value).__name__}, not a {kind.__name__}")
    level = [value]
    for _ in range(MAX_DEPTH):
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
    if level:
        raise ValueError(f"{what} is JSON nested more than {MAX_DEPTH} deep")
    return value


def _plain_attr(v):
    """An attribute as the checksum sees it: text, a number or a flag, or for anything else its type (which no
    writer writes, so the reader refuses it anyway)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (str, bool, int, float, np.bool_, np.integer, np.floating)):
        return v.item() if isinstance(v, np.generic) else v
    return f"<{type(v).__name__}>"


def attrs_crc(f):
    """CRC32 of the canonical JSON of every attribute of the open snapshot ``f`` and of its tables' groups, but
    ``ATTRS_CRC`` itself."""
    def attrs(obj):
        return {k: _plain_attr(v) for k, v in obj.attrs.items() if k != ATTRS_CRC}
    doc = {"file": attrs(f), "tables": {name: attrs(g) for name, g in f["tables"].items()}}
    return zlib.crc32(json.dumps(doc, sort_keys=True).encode())


def layout_spans(layout, where):
    """``{part: [start, stop]}`` from slices or pairs, checked to tile the row columns from 0, weights first."""
    spans = {name: [s.start, s.stop] if isinstance(s, slice) else [int(s[0]), int(s[1])]
             for name, s in layout.items()}
    stops = [0] + [stop for _, stop in spans.values()]
    if next(iter(spans), None) != "weights" or [start for start, _ in spans.values()] != stops[:-1] or \
            any(a >= b for a, b in zip(stops, stops[1:])):
        raise ValueError(f"{where}: layout {spans} must start with 'weights' and tile the row columns from 0 "
                         "without gaps; pass optim.rowwise.row_layout(rule, D)")
    return spans


@dataclass(frozen=True)
class TableSnapshot:
    """One table's config, row layout and rows: arrays ``keys [n]``, ``rows [n, width]``, ``steps [n]`` or None
    (NumPy or CuPy), or, from ``from_chunks``, an iterable of ``(keys, rows, steps)`` for a table too big to hold.
    ``part_dtypes``: ``{part: dtype}`` where a part reads as another dtype than the rows (None: none does)."""
    config: dict
    layout: dict
    keys: object = None
    rows: object = None
    steps: object = None
    source: object = field(default=None, repr=False)
    part_dtypes: dict = None
    extras: dict = None  # {name: array} of EXTRAS
    clock: int = None  # the table's update clock, the group's ``clock`` attribute (None: not written)

    @classmethod
    def from_chunks(cls, config, layout, chunks, part_dtypes=None):
        """A table streamed from ``chunks``, an iterable of ``(keys, rows, steps)`` of any sizes, read once."""
        return cls(config, layout, source=chunks, part_dtypes=part_dtypes)

    def validate(self, name):
        if (self.source is None) == (self.keys is None or self.rows is None):
            raise ValueError(f"TableSnapshot {name!r}: give either keys and rows, or chunks through from_chunks")
        layout_spans(self.layout, f"TableSnapshot {name!r}")
        return self

    @property
    def width(self):
        return list(layout_spans(self.layout, "TableSnapshot").values())[-1][1]

    def chunks(self, chunk_rows):
        """``(keys, rows, steps)`` pieces: slices of ``chunk_rows`` rows (one, maybe empty, at least), or as given."""
        if self.source is not None:
            return iter(self.source)
        s = self.steps
        return ((self.keys[a:a + chunk_rows], self.rows[a:a + chunk_rows], None if s is None else s[a:a + chunk_rows])
                for a in range(0, max(len(self.keys), 1), chunk_rows))
