"""What the planner is given, as data: ``TableSpec`` (one table and how it is used) and ``RankBudget`` (one rank's
memory per tier).

Both are frozen dataclasses that check themselves when made, so a bad input fails with a message naming the field
and what to use instead; ``to_dict()``/``from_dict()`` round-trip through plain values for the plan's JSON.
"""
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from gpuemb import optim
from gpuemb.autograd.checks import check_int, fail

POOLINGS = ("sum", "mean", None)
SHARDINGS = ("auto", "table", "row", "column", "data", "table_row", "grid")


@dataclass(frozen=True)
class TableSpec:
    """One embedding table as the planner sees it.

    ``rows``: the keys it will hold (a table's cardinality, or the unique keys expected where keys are hashed);
    ``lookups_per_sample``: keys per sample (1 for one-hot, the mean bag size for multi-hot); ``pooling``: how a
    sample's rows are combined ("sum", "mean"; None returns one row per key); ``rule``: the row update rule's class
    name, which sets the row width; ``sharding``: "auto" lets the planner choose, or one of table, row, column,
    data, table_row (row-wise over one host's ranks) or grid (column shards over the hosts, each row-wise over
    its host's ranks; ``sharding/hierarchical.py``).
    """
    name: str
    rows: int
    dim: int
    lookups_per_sample: float = 1.0
    pooling: str = "sum"
    dtype: str = "float32"
    rule: str = "RowwiseAdagradRule"
    sharding: str = "auto"

    def __post_init__(self):
        owner = f"TableSpec({self.name!r})"
        if not isinstance(self.name, str) or not self.name:
            fail("TableSpec", f"name={self.name!r}; give the table a non-empty string name")
        for field in ("rows", "dim"):
            check_int(owner, field, getattr(self, field), 1)
        lps = self.lookups_per_sample
        if not (isinstance(lps, (int, float)) and not isinstance(lps, bool) and math.isfinite(lps) and lps > 0):
            fail(owner, f"lookups_per_sample={lps!r}; use a finite number > 0 (the mean keys per sample)")
        if self.pooling not in POOLINGS:
            fail(owner, f"pooling={self.pooling!r}; use 'sum', 'mean' or None")
        try:
            kind = np.dtype(self.dtype).kind
        except TypeError:
            kind = None
        if kind != "f":
            fail(owner, f"dtype={self.dtype!r}; use a float dtype such as float32 or float16")
        try:
            optim.rule_class(self.rule, "")
        except ValueError:
            fail(owner, f"rule={self.rule!r}; use one of {', '.join(c.__name__ for c in optim.RULES.values())}")
        if self.sharding not in SHARDINGS:
            fail(owner, f"sharding={self.sharding!r}; use one of {', '.join(SHARDINGS)}")

    @classmethod
    def from_config(cls, config, rows, lookups_per_sample=1.0, pooling="sum", sharding="auto"):
        """The spec of a store ``TableConfig`` expected to hold ``rows`` keys."""
        return cls(config.name, rows, config.dim, lookups_per_sample, pooling, config.dtype,
                   type(config.rule).__name__, sharding)

    @property
    def itemsize(self):
        return np.dtype(self.dtype).itemsize

    def row_width(self, cols=None):
        """Elements of a stored row holding ``cols`` of the weights (all ``dim`` by default) and their state."""
        return optim.row_width(optim.rule_class(self.rule, "TableSpec")(), self.dim if cols is None else cols)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)


@dataclass(frozen=True)
class RankBudget:
    """The bytes one rank may give the embedding store in each tier; a tier of 0 bytes is not used."""
    device_bytes: int
    host_bytes: int = 0
    ssd_bytes: int = 0

    def __post_init__(self):
        for field in ("device_bytes", "host_bytes", "ssd_bytes"):
            check_int("RankBudget", field, getattr(self, field), 0, note=" (bytes)")
        if self.device_bytes == 0:
            fail("RankBudget", "device_bytes=0; a rank computes on device rows, so give it device memory")

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)
