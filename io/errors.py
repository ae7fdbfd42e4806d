"""What goes wrong with data, and the report that counts the bad lines a reader skipped.

Every error names the file (and the line, where there is one), says what was wrong, and what to do. Readers never
let a raw traceback out of the parser: a bad line is skipped and counted, or, with ``strict=True``, raised as a
:class:`BadLineError`.
"""
import warnings
from collections import Counter
from dataclasses import dataclass, field


class DataError(ValueError):
    """A data file cannot be used as it is: missing, empty, corrupt, or not the layout that was asked for."""


class SchemaError(DataError):
    """A file's columns do not match the schema it is read with, or the schema itself is inconsistent."""


class ShardError(DataError):
    """An HDF5 shard cannot be read: truncated, corrupt, or not written by the converter."""


class BadLineError(DataError):
    """A malformed line, raised instead of skipped because the reader runs with ``strict=True``."""

    def __init__(self, bad):
        self.bad = bad
        unit = getattr(bad, "unit", "line")
        super().__init__(f"{bad}. Fix or drop the {unit}, or read without strict=True to skip and count bad "
                         f"{unit}s.")


class UncheckedShardWarning(UserWarning):
    """Shards of version 1, written before shards carried checksums, are read without checking their bytes."""


class UnlistedShardWarning(UncheckedShardWarning):
    """Shards of a folder without a manifest, converted before manifests, are read without noticing a missing,
    extra or swapped shard."""


class BadLineWarning(UserWarning):
    """A malformed line was skipped (only the first few of a run are warned about)."""


@dataclass(frozen=True)
class BadLine:
    """One malformed line: where it is and why it was skipped."""
    path: str
    line: int
    reason: str
    unit = "line"  # what a bad one is called in messages; a Parquet reader's BadRow says "row"

    def __str__(self):
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ParseReport:
    """Counts of what a reader kept and skipped, with the first few bad lines (file:line and reason)."""
    max_reported: int = 10
    rows: int = 0
    bad: int = 0
    reasons: Counter = field(default_factory=Counter)
    first_bad: list = field(default_factory=list)
    unit: str = "line"  # what the reader reads one record of: text is read by lines, Parquet by rows

    def add_bad(self, bad, kind, strict):
        """Count one bad line; raise it under ``strict``, warn about it while few have been seen."""
        if strict:
            raise BadLineError(bad)
        self.bad += 1
        self.reasons[kind] += 1
        if len(self.first_bad) < self.max_reported:
            self.first_bad.append(bad)
            warnings.warn(str(bad), BadLineWarning, stacklevel=3)

    def count_bad(self, counts):
        """Count bad lines that are not reported one by one: ``counts`` maps a reason to a number of lines."""
        for kind, n in counts.items():
            self.bad += n
            self.reasons[kind] += n

    def summary(self):
        """One line for logs: rows kept, lines skipped by reason, and the first bad line."""
        text = f"{self.rows} rows read, {self.bad} bad {self.unit}s skipped"
        if self.bad:
            reasons = ", ".join(f"{k}: {n}" for k, n in self.reasons.most_common())
            text += f" ({reasons})" + (f"; first: {self.first_bad[0]}" if self.first_bad else "")
        return text
