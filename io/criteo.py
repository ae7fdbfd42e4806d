"""Criteo's raw layout: the Kaggle ``train.txt`` and the 1TB day files (plain or gzip).

Each line is ``label<TAB>I1..I13<TAB>C1..C26``: 40 fields. I1..I13 are integer counts, possibly negative or
empty; C1..C26 are 8-hex-digit tokens, possibly empty. The tokens are parsed as hex (see
:mod:`gpuemb.io.hashing`), so a token that is not hex makes the line bad.
"""
from gpuemb.io.reader import ReadOptions, TextReader
from gpuemb.io.schema import Schema

DENSE = tuple(f"I{i}" for i in range(1, 14))
SPARSE = tuple(f"C{i}" for i in range(1, 27))
NAMES = ("label",) + DENSE + SPARSE


def criteo_schema(delimiter="\t", header=False):
    """The Criteo schema; ``delimiter=","`` with ``header=True`` reads the CSV form with a header line."""
    return Schema.from_roles(NAMES, ["label"], DENSE, SPARSE, kind="hex", delimiter=delimiter, header=header)


def read_criteo(paths, options=ReadOptions()):
    """A streaming reader of Criteo raw TSV files."""
    return TextReader(paths, criteo_schema(), options)
