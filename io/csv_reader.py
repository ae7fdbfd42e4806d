"""CSV files with a header line: the header names the columns, a few lists give their roles.

Columns the roles do not name are ignored. Fields are split on the delimiter as they are: quoted fields holding
the delimiter are not supported (such a line has a wrong field count and is skipped as bad).
"""
import os

from gpuemb.io.errors import DataError
from gpuemb.io.reader import ReadOptions, TextReader, header_names
from gpuemb.io.schema import Schema


def csv_schema(path, label, dense=(), categorical=(), kind="str", positive=None, delimiter=","):
    """The schema of ``path`` from its header and the role lists (see :meth:`Schema.from_roles`)."""
    return Schema.from_roles(header_names(path, delimiter), label, dense, categorical, kind=kind,
                             positive=positive, delimiter=delimiter, header=True)


def read_csv(paths, label, dense=(), categorical=(), kind="str", positive=None, delimiter=",",
             options=ReadOptions()):
    """A streaming reader of CSV files with a header; every file must have the first file's header."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise DataError("read_csv: no input files were given; pass at least one path")
    return TextReader(paths, csv_schema(paths[0], label, dense, categorical, kind, positive, delimiter), options)
