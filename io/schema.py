"""The schema of a delimited text file: each column's name and role, and how its values become numbers.

Roles: ``label`` (a number, or 1.0 where the value equals ``positive``), ``dense`` (a number; empty is missing),
``categorical`` (a token hashed to an id, see :mod:`gpuemb.io.hashing` for the kinds) and ``ignore``.
The outputs keep the schema's order within each role: label ``[N, T]``, dense ``[N, n_dense]``,
sparse ``[N, n_sparse]``.

The same schema describes a Parquet file (``reader="parquet"``, :mod:`gpuemb.io.parquet`), whose list columns are
categorical columns of hotness ``JAGGED``: a bag of tokens per row (:mod:`gpuemb.io.bags`), not one.
"""
import json
from dataclasses import asdict, dataclass

from gpuemb.io.bags import JAGGED
from gpuemb.io.errors import SchemaError
from gpuemb.io.hashing import KINDS

ROLES = ("label", "dense", "categorical", "ignore")
READERS = ("text", "parquet")  # what reads the files: delimited text (io/reader.py) or pyarrow (io/parquet.py)


@dataclass(frozen=True)
class Column:
    """One column: ``kind`` matters for categorical columns, ``positive`` for labels read from a token;
    ``hotness`` is 1 (one token a row) or ``JAGGED`` (a list of tokens a row, Parquet's list columns)."""
    name: str
    role: str
    kind: str = "str"
    positive: str | None = None
    hotness: int = 1

    def validate(self):
        if self.role not in ROLES:
            raise SchemaError(f"column {self.name!r}: role {self.role!r} is not one of {ROLES}")
        if self.kind not in KINDS:
            raise SchemaError(f"column {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.positive is not None and self.role != "label":
            raise SchemaError(f"column {self.name!r}: only a label column can have a positive value")
        if self.positive == "":
            raise SchemaError(f"column {self.name!r}: the positive value is empty; name the value that means 1.0")
        if self.hotness not in (1, JAGGED) or (self.hotness == JAGGED and self.role != "categorical"):
            raise SchemaError(f"column {self.name!r}: hotness {self.hotness} for a {self.role} column; only a "
                              f"categorical column can be jagged ({JAGGED}), every other has hotness 1")
        return self


@dataclass(frozen=True)
class Schema:
    """The columns of a file, in file order, with its delimiter and whether its first line is a header (text),
    and which reader reads it."""
    columns: tuple
    delimiter: str = ","
    header: bool = False
    reader: str = "text"

    def validate(self):
        for c in self.columns:
            c.validate()
        names = [c.name for c in self.columns]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SchemaError(f"schema: column names {dup} appear more than once; give each column its own name")
        if not self.label_names:
            raise SchemaError("schema: no column has the role 'label'; name at least one label column")
        if len(self.delimiter.encode()) != 1 or self.delimiter == "\n":
            raise SchemaError(f"schema: delimiter {self.delimiter!r} must be one byte other than a newline")
        if self.reader not in READERS:
            raise SchemaError(f"schema: reader {self.reader!r} is not one of {READERS}")
        jagged = [c.name for c in self.columns if c.hotness == JAGGED]
        if jagged and self.reader == "text":
            raise SchemaError(f"schema: the jagged columns {jagged} need a reader of lists (parquet); a text line "
                              "holds one token a field")
        return self

    def names(self, role):
        return [c.name for c in self.columns if c.role == role]

    @property
    def label_names(self):
        return self.names("label")

    @property
    def dense_names(self):
        return self.names("dense")

    @property
    def sparse_names(self):
        return self.names("categorical")

    @property
    def sparse_hotness(self):
        """Per categorical column, 1 or ``JAGGED``: a ShardLayout's ``hotness``."""
        return tuple(c.hotness for c in self.columns if c.role == "categorical")

    def check_header(self, header, where):
        """Raise a :class:`SchemaError` naming ``where`` unless ``header`` lists exactly this schema's columns."""
        expected = [c.name for c in self.columns]
        if header == expected:
            return
        if len(header) != len(expected):
            raise SchemaError(f"{where}: the header has {len(header)} columns, the schema {len(expected)}; "
                              f"header starts {header[:4]}, schema {expected[:4]}. Read it with a schema "
                              "built from this header (Schema.from_roles).")
        i = next(i for i, (h, e) in enumerate(zip(header, expected)) if h != e)
        raise SchemaError(f"{where}: header column {i + 1} is {header[i]!r}, the schema expects {expected[i]!r}. "
                          "Read it with a schema built from this header (Schema.from_roles).")

    def to_json(self):
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        return cls(tuple(Column(**c) for c in d["columns"]), d["delimiter"], d["header"],
                   d.get("reader", "text")).validate()

    @classmethod
    def from_roles(cls, names, label, dense=(), categorical=(), kind="str", positive=None, delimiter=",",
                   header=True, jagged=(), reader="text"):
        """A schema for the columns ``names`` (e.g. a CSV header): the named roles, every other column ignored.

        ``label``, ``dense`` and ``categorical`` list column names; ``kind`` is the kind of every categorical
        column, or a dict of name to kind; ``positive`` maps a label name to the value that means 1.0;
        ``jagged`` names the categorical columns that hold a list of tokens a row.
        """
        roles = {}
        for role, listed in (("label", label), ("dense", dense), ("categorical", categorical)):
            for name in listed:
                if name not in names:
                    raise SchemaError(f"schema: {role} column {name!r} is not among the columns {list(names)}")
                if name in roles:
                    raise SchemaError(f"schema: column {name!r} is given both roles {roles[name]!r} and {role!r}")
                roles[name] = role
        kinds = kind if isinstance(kind, dict) else {}
        positive = positive or {}
        cols = tuple(Column(n, roles.get(n, "ignore"), kinds.get(n, kind if isinstance(kind, str) else "str"),
                            positive.get(n), JAGGED if n in jagged else 1) for n in names)
        return cls(cols, delimiter, header, reader).validate()
