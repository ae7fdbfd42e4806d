"""The raw formats the converter reads, by name: what ``--format`` may say, declared once for every tool.

Each maps the files (and, for csv and parquet, the columns named by the user) to the file's ``Schema``; the fixed
formats take no columns. :func:`reader_for` is the one place that picks the reader a schema's files need.
"""
import importlib

from .avazu import avazu_schema
from .census import census_schema
from .criteo import criteo_schema
from .csv_reader import csv_schema
from .errors import DataError
from .reader import TextReader


def _fixed(schema):
    return lambda paths, **columns: schema()


def _csv(paths, label, dense=(), categorical=(), **options):
    return csv_schema(paths[0], label, dense or (), categorical or (), **options)


def _parquet(paths, label=None, dense=(), categorical=(), kind="str", **text_options):
    # text_options (delimiter, positive) describe text; a Parquet file's types say how its values are read
    return parquet_module("parquet_schema").parquet_schema(paths[0], label, dense or (), categorical or (), kind)


FORMATS = {"criteo": _fixed(criteo_schema), "avazu": _fixed(avazu_schema), "census": _fixed(census_schema),
           "csv": _csv, "parquet": _parquet}
NAMED_COLUMNS = ("csv", "parquet")  # the formats whose label, dense and categorical columns the user names


def schema_for(fmt, paths, **columns):
    """The Schema of ``paths`` in format ``fmt``; ``columns``: csv's and parquet's label, dense, categorical,
    kind, and csv's delimiter."""
    return FORMATS[fmt](paths, **columns)


def reader_for(paths, schema, options, report=None, max_bag=None):
    """The streaming reader of ``paths`` that ``schema.reader`` names: text, or Parquet through pyarrow (whose
    list columns may hold up to ``max_bag`` keys a row)."""
    if schema.reader == "parquet":
        return parquet_module("parquet").ParquetReader(paths, schema, options, report, max_bag)
    return TextReader(paths, schema, options, report)


def parquet_module(name):
    """``gpuemb.io.<name>``, a module that needs pyarrow: imported only when Parquet is read, so the rest of the
    package works without it, and a missing pyarrow is one line that says how to install it."""
    try:
        return importlib.import_module(f"gpuemb.io.{name}")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("pyarrow"):
            raise
        raise DataError("reading Parquet needs pyarrow, which is not installed; install it with "
                        "pip install -e '.[parquet]'") from None
