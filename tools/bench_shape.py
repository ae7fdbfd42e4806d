"""The shape of the embedding ops that ``tools/bench_ops.py`` times, declared once: flags and a JSON file read it.

A shape is ``tables`` tables, each of ``rows`` rows of ``dims`` weights (one value for all, or one per table:
mixed dims are allowed), looked up by ``batch`` samples with one bag of ids per table and sample. A bag's length
comes from ``bag``, the ids from a Zipf law of exponent ``zipf`` over each table's rows (0: uniform), and the
rows are stored in ``precision``, updated by ``optimizer`` at ``lr`` and pooled by ``pooling``. In a JSON file
every key is a field name below, every value as on the command line or as JSON numbers and lists:

    {"tables": 4, "rows": [1000, 100000, 5000000, 20000], "dims": [16, 64, 64, 128], "batch": 2048,
     "bag": "uniform:1:40", "zipf": 1.05, "precision": "fp16", "optimizer": "rowwise_adagrad", "pooling": "sum"}

Bag lengths (``bag``), every bag of a batch drawn alone:
- ``20`` (or ``fixed:20``): every bag holds 20 ids, as FBGEMM's benchmark's ``--bag-size``;
- ``uniform:LO:HI``: a length drawn uniformly from LO..HI, both included (LO may be 0: empty bags);
- ``poisson:MEAN``: Poisson of mean MEAN (so some bags may be empty, as a feature missing from a sample);
- ``zipf:ALPHA:MAX``: length k in 1..MAX with odds k**-ALPHA: most bags short, a few long (a user's history).

The module is plain NumPy, with no gpuemb import, so that the peer's process (``bench_ops_peer.py``) draws the
very same batches from the same shape without starting gpuemb's threads beside torch's.
"""
import dataclasses
import json
import math
from dataclasses import dataclass, field

import numpy as np

# What the store offers (gpuemb.store.options.DTYPES, gpuemb.optim.RULES, kernels.embedding_bag.MODES);
# tests/tools/test_bench_ops.py checks that these names still match the store's.
PRECISIONS = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl")
POOLINGS = ("sum", "mean", "max")
N_BATCHES = 4  # distinct batches each side cycles through, each seen in the warm-up: no timed call inserts them all
PRIME = (1 << 31) - 1  # zipf_ids scatters ranks by multiplying by it modulo the rows: a table has fewer rows


class ShapeError(ValueError):
    """A shape that cannot be run; its message is one line: where, what, what to do."""


@dataclass(frozen=True)
class BagSizes:
    """How many ids a bag holds: ``kind`` "fixed" (``a`` ids), "uniform" (``a``..``b``), "poisson" (mean ``a``)
    or "zipf" (1..``b`` with odds k**-``a``). ``parse`` reads the text form of the module docstring."""
    kind: str
    a: float
    b: float = 0

    FORMS = "20, fixed:20, uniform:1:40, poisson:20 or zipf:1.2:100"

    @classmethod
    def parse(cls, text):
        parts = str(text).split(":")
        try:
            numbers = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
        except ValueError:
            raise ShapeError(f"{text!r} is not a bag size; write {cls.FORMS}") from None
        kind = parts[0] if len(parts) > 1 else "fixed"
        want = {"fixed": 1, "uniform": 2, "poisson": 1, "zipf": 2}
        if kind not in want:
            raise ShapeError(f"{text!r}: unknown distribution {kind!r}; write {cls.FORMS}")
        if len(numbers) != want[kind]:
            raise ShapeError(f"{text!r}: {kind} takes {want[kind]} number(s) after its name; write {cls.FORMS}")
        bag = cls(kind, *numbers)
        bag.validate(text)
        return bag

    def validate(self, text):
        a, b = self.a, self.b
        ok = {"fixed": a >= 1 and a.is_integer(),
              "uniform": 0 <= a <= b and b >= 1 and a.is_integer() and b.is_integer(),
              "poisson": 0 < a <= 1e6, "zipf": 0 < a <= 100 and 1 <= b <= 1e6 and b.is_integer()}[self.kind]
        if not ok:
            rule = {"fixed": "a whole number of ids >= 1", "uniform": "whole numbers with 0 <= LO <= HI and HI >= 1",
                    "poisson": "a mean above 0, up to 1e6", "zipf": "an exponent in (0, 100] and a whole MAX >= 1"}
            raise ShapeError(f"{text!r}: {self.kind} needs {rule[self.kind]}; e.g. {self.FORMS}")

    def draw(self, rng, n):
        """``n`` bag lengths (int64)."""
        if self.kind == "fixed":
            return np.full(n, int(self.a), np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, n, dtype=np.int64)
        if self.kind == "poisson":
            return rng.poisson(self.a, n).astype(np.int64)
        odds = np.arange(1, int(self.b) + 1, dtype=np.float64) ** -self.a
        return 1 + rng.choice(odds.size, n, p=odds / odds.sum()).astype(np.int64)

    def __str__(self):
        numbers = [self.a] if self.kind in ("fixed", "poisson") else [self.a, self.b]
        return ":".join([self.kind] + [f"{x:g}" for x in numbers])


def _integer(value):
    """A flag's text or a JSON value as an int: 100000, "1e6" and 64.0 are whole; 1.5, "x" and true are not."""
    x = _real(value, "a whole number")
    if not x.is_integer():
        raise ShapeError(f"{value!r} is not a whole number")
    return int(x)


def _ints(value):
    """``100000`` or ``1000,200000`` (a flag), or a JSON int or list: a tuple of ints."""
    values = value if isinstance(value, list) else str(value).split(",") if isinstance(value, str) else [value]
    if not values:
        raise ShapeError("an empty list; give one count, or one per table")
    return tuple(_integer(v) for v in values)


def _real(value, what="a number"):
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            pass
    raise ShapeError(f"{value!r} is not {what}")


def _spec(parse, help, metavar):
    return {"parse": parse, "help": help, "metavar": metavar}


@dataclass(frozen=True)
class OpShape:
    """The shape of one benchmark of the embedding ops (the module docstring). Each field's metadata is its flag:
    ``parse`` reads a flag's text or a JSON value, ``help`` says what it is."""
    tables: int = field(default=8, metadata=_spec(_integer, "number of tables (default 8)", "T"))
    rows: tuple = field(default=(100_000,), metadata=_spec(
        _ints, "rows of each table: one count, or one per table, comma-separated (default 100000)", "N[,N...]"))
    dims: tuple = field(default=(64,), metadata=_spec(
        _ints, "dim of each table: one, or one per table for mixed dims (default 64)", "D[,D...]"))
    batch: int = field(default=2048, metadata=_spec(_integer, "samples a batch (default 2048)", "B"))
    bag: str = field(default="20", metadata=_spec(
        str, f"ids a bag: {BagSizes.FORMS} (default 20)", "DIST"))
    zipf: float = field(default=1.05, metadata=_spec(
        _real, "Zipf exponent of the ids, 0 = uniform (default 1.05)", "ALPHA"))
    precision: str = field(default="fp32", metadata=_spec(
        str, f"stored rows: {', '.join(PRECISIONS)} (default fp32)", "P"))
    optimizer: str = field(default="adagrad", metadata=_spec(
        str, f"the rows' rule: {', '.join(OPTIMIZERS)} (default adagrad)", "RULE"))
    pooling: str = field(default="sum", metadata=_spec(
        str, f"{', '.join(POOLINGS)} (default sum)", "MODE"))
    lr: float = field(default=0.01, metadata=_spec(_real, "learning rate of the rows (default 0.01)", "LR"))
    seed: int = field(default=0, metadata=_spec(_integer, "seed of the ids and bag lengths (default 0)", "S"))

    def validate(self, where=lambda name: name):
        """Raise a one-line ``ShapeError`` for the first field that cannot run; ``where(field)`` names it there
        (a flag, or a file's key)."""
        def need(ok, name, text):
            if not ok:
                raise ShapeError(f"{where(name)}: {text}")
        need(self.tables >= 1, "tables", f"{self.tables}; give 1 table or more")
        for name in ("rows", "dims"):
            values = getattr(self, name)
            need(len(values) in (1, self.tables), name,
                 f"{len(values)} values for {self.tables} tables; give one for all, or one per table")
            need(min(values) >= 1, name, f"{min(values)} is below 1; every table needs 1 {name[:-1]} or more")
        need(max(self.rows) < PRIME, "rows", f"{max(self.rows)}; give fewer than {PRIME} rows a table")
        need(self.batch >= 1, "batch", f"{self.batch}; give 1 sample or more")
        need(math.isfinite(self.zipf) and 0 <= self.zipf <= 10, "zipf", f"{self.zipf}; give 0 (uniform) to 10")
        need(math.isfinite(self.lr) and self.lr >= 0, "lr", f"{self.lr}; give a finite rate >= 0")
        need(self.seed >= 0, "seed", f"{self.seed}; give a seed >= 0")
        for name, names in (("precision", PRECISIONS), ("optimizer", OPTIMIZERS), ("pooling", POOLINGS)):
            need(getattr(self, name) in names, name, f"{getattr(self, name)!r}; use one of {', '.join(names)}")
        try:
            self.bags()
        except ShapeError as e:
            raise ShapeError(f"{where('bag')}: {e}") from None

    def per_table(self, name):
        """``rows`` or ``dims``, one per table."""
        values = getattr(self, name)
        return values * self.tables if len(values) == 1 else values

    def bags(self):
        return BagSizes.parse(self.bag)

    def describe(self):
        def listed(name):
            values = getattr(self, name)
            return f"{values[0]:,}" if len(values) == 1 else "/".join(f"{v:,}" for v in values)
        return (f"{self.tables} tables of {listed('rows')} rows, dim {listed('dims')}, batch {self.batch}, bags "
                f"{self.bag}, ids Zipf({self.zipf:g}), {self.precision}, {self.optimizer} lr {self.lr:g}, "
                f"{self.pooling} pooling")

    def batches(self, count):
        """``count`` batches ``(values [N] int64, lengths [T·B] int64)``, feature-major as FBGEMM's TBE and
        ``JaggedFeatures`` take them: table 0's B bags, then table 1's. The same shape gives the same batches in
        every process."""
        rng, bag = np.random.default_rng(self.seed), self.bags()
        out = []
        for _ in range(count):
            lengths = [bag.draw(rng, self.batch) for _ in range(self.tables)]
            values = [zipf_ids(rng, int(n.sum()), rows, self.zipf) for n, rows in zip(lengths, self.per_table("rows"))]
            out.append((np.concatenate(values), np.concatenate(lengths)))
        return out

    def to_dict(self):
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(OpShape)}


def zipf_ids(rng, n, rows, alpha):
    """``n`` ids of 0..rows-1, rank k (1..rows) drawn with odds about k**-alpha (0: uniform), O(n) at any ``rows``:
    the continuous law of density x**-alpha on [0.5, rows + 0.5], inverted and rounded (exact for alpha 0; the
    top rank's odds within 10% of Zipf's for alpha up to 1.2). Ranks are scattered over the rows by a
    multiplication by a prime, so the hot rows are not neighbours in memory (real ids are not)."""
    u, lo, hi = rng.random(n), 0.5, rows + 0.5
    if alpha == 1:
        x = lo * (hi / lo) ** u
    else:
        x = (lo ** (1 - alpha) + u * (hi ** (1 - alpha) - lo ** (1 - alpha))) ** (1 / (1 - alpha))
    rank = np.clip(np.floor(x + 0.5).astype(np.int64), 1, rows) - 1  # 0..rows-1
    return rank * PRIME % rows  # a bijection of 0..rows-1, PRIME being prime and above rows


def resolve(given, path=None):
    """The ``OpShape`` of the defaults, overridden by the JSON file at ``path`` (if any), overridden by the flags
    ``given`` (field -> flag text, those given only), validated. Raises ``ShapeError`` with one line naming the
    flag or the file's key."""
    values, source = {}, {name: f"--{name}" for name in FIELDS}
    if path is not None:
        from_file = read_file(path)
        values.update(from_file)
        source.update({name: f"{path}: {name}" for name in from_file})
    for name, text in given.items():
        values[name], source[name] = text, f"--{name}"
    parsed = {}
    for name, value in values.items():
        try:
            parsed[name] = FIELDS[name].metadata["parse"](value)
        except ShapeError as e:
            raise ShapeError(f"{source[name]}: {e}") from None
    shape = OpShape(**parsed)
    shape.validate(source.get)
    return shape


def read_file(path):
    """The JSON object at ``path``: field name -> value; an unknown key, or not an object, is a ShapeError."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ShapeError(f"{path}: cannot read the shape ({e.strerror}); give a readable JSON file") from None
    except ValueError as e:
        raise ShapeError(f"{path}: not JSON ({e}); see tools/shapes/ for examples") from None
    if not isinstance(data, dict):
        raise ShapeError(f"{path}: a shape is a JSON object of fields, got a {type(data).__name__}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ShapeError(f"{path}: unknown key {unknown[0]!r}; a shape's keys are {', '.join(FIELDS)}")
    return data


def add_flags(parser):
    """One flag per field of ``OpShape``, each None unless given (so a flag given wins over the file)."""
    group = parser.add_argument_group("shape of the embedding ops (any of these, or --shape, runs them)")
    group.add_argument("--shape", metavar="FILE", help="a JSON shape (tools/shapes/*.json); flags given win")
    for name, f in FIELDS.items():
        group.add_argument(f"--{name}", metavar=f.metadata["metavar"], help=f.metadata["help"])


def given_flags(args):
    """``{field: flag text}`` of the shape flags given in ``args`` (argparse's namespace)."""
    return {name: getattr(args, name) for name in FIELDS if getattr(args, name) is not None}
