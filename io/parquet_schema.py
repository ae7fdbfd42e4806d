"""The Schema of a Parquet file, from its own column types and the names a user gives each role.

A Parquet column carries its type, so the user names only the roles (as for CSV), and the type says the rest:

- label, dense: a number (int, float, decimal, bool), or text parsed as a number as the text reader parses it;
- categorical: an int (or bool) column hashes its values as the ``int`` kind does the same digits in a CSV file;
  a string (or binary) column hashes its tokens by ``kind`` (``str``: FNV-1a of the bytes, ``hex``, ``int``); a
  list of either (``list``, ``large_list``, ``fixed_size_list``) is a jagged feature, each element a token.

Dictionary-encoded columns count as their values' type. Any other type (a float id, a timestamp, a struct, a list
of floats) is refused with one line naming the file, the column and its type.
"""
import os

import pyarrow as pa
import pyarrow.parquet as pq

from gpuemb.io.bags import JAGGED
from gpuemb.io.errors import DataError, SchemaError
from gpuemb.io.schema import Schema

_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)


def open_parquet(path):
    """``pq.ParquetFile(path)``, its footer read; a missing, empty, truncated or non-Parquet file is a DataError
    naming ``path``. Pages are checked against the CRCs their writer stored (parquet-mr, so Spark, stores them by
    default; pyarrow only when asked), so a flipped bit there fails its row group instead of reading wrong."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file" + (" (it is a folder)" if os.path.isdir(path) else "")
                        + "; check the path")
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: is not a Parquet file, or is truncated ({one_line(e)}); give a complete "
                        ".parquet file (copy or write it again)") from None


def one_line(e):
    return " ".join(str(e).split())


def value_kind(t):
    """``"int"``, ``"float"`` or ``"text"``: how a scalar Arrow type's values are read; None for any other."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "text"
    return None


def list_item(t):
    """The element type of a list type, or None for a type that is not a list."""
    return t.value_type if any(is_list(t) for is_list in _LISTS) else None


def _fits(column, t):
    """None if a column of Arrow type ``t`` can play ``column``'s role, else why not (and what to do)."""
    item = list_item(t)
    if column.role != "categorical":
        if item is None and value_kind(t) is not None:
            return None
        return f"a {column.role} column holds one number a row; cast it to float64"
    if column.hotness == JAGGED and item is None:
        return "the schema reads it as a list (from the first file) but this file has one value a row"
    if column.hotness != JAGGED and item is not None:
        return "the schema reads one value a row (from the first file) but this file has a list"
    if value_kind(item if item is not None else t) in ("int", "text"):
        return None
    return ("a categorical column holds int or string ids" + (" (or lists of them)" if item is None else "")
            + "; cast it to int64 or string")


def _listed(fields, most=40):
    text = ", ".join(f"{f.name} ({f.type})" for f in list(fields)[:most])
    return text + (f", ... and {len(fields) - most} more" if len(fields) > most else "")


def _require(path, fields, role, name):
    if name not in fields.names:
        raise SchemaError(f"{path}: {role} column {name!r} is not in the file; its columns: {_listed(fields)}")


def check_fields(path, fields, schema):
    """A SchemaError naming ``path`` and the column, unless every column ``schema`` reads is among ``fields`` (an
    Arrow schema) with a type that fits its role."""
    for column in schema.columns:
        if column.role == "ignore":
            continue
        _require(path, fields, column.role, column.name)
        t = fields.field(column.name).type
        why = _fits(column, t)
        if why:
            raise SchemaError(f"{path}: column {column.name!r} is {t}; {why}")


def parquet_schema(path, label, dense=(), categorical=(), kind="str"):
    """The Schema of Parquet file ``path``: ``label``, ``dense`` and ``categorical`` name its columns (every other
    is ignored); list columns named categorical are jagged; ``kind`` is how string tokens are hashed."""
    with open_parquet(path) as f:
        fields = f.schema_arrow
    if not label or not (dense or categorical):
        raise SchemaError(f"{os.fspath(path)}: name the label column (--label) and at least one dense or "
                          f"categorical column (--dense, --categorical); the file's columns: {_listed(fields)}")
    for role, listed in (("label", label), ("dense", dense), ("categorical", categorical)):
        for name in listed:
            _require(os.fspath(path), fields, role, name)
    types = {name: fields.field(name).type for name in categorical}
    jagged = [name for name, t in types.items() if list_item(t) is not None]
    kinds = {name: "int" if value_kind(t if list_item(t) is None else list_item(t)) == "int" else kind
             for name, t in types.items()}
    schema = Schema.from_roles(fields.names, label, dense, categorical, kind=kinds, header=False, jagged=jagged,
                               reader="parquet")
    check_fields(os.fspath(path), fields, schema)
    return schema
