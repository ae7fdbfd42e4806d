"""The raw formats the converter reads, by name: what ``--format`` may say, declared once for every tool.

Each maps the files (and, for csv, the columns named by the user) to the file's ``Schema``; the fixed formats
take no columns.
"""
from .avazu import avazu_schema
from .census import census_schema
from .criteo import criteo_schema
from .csv_reader import csv_schema


def _fixed(schema):
    return lambda paths, **columns: schema()


def _csv(paths, label, dense=(), categorical=(), **options):
    return csv_schema(paths[0], label, dense or (), categorical or (), **options)


FORMATS = {"criteo": _fixed(criteo_schema), "avazu": _fixed(avazu_schema), "census": _fixed(census_schema),
           "csv": _csv}


def schema_for(fmt, paths, **columns):
    """The Schema of ``paths`` in format ``fmt``; ``columns``: csv's label, dense, categorical, kind, delimiter."""
    return FORMATS[fmt](paths, **columns)
