"""The Avazu CTR competition's CSV: a header, ``id``, ``click`` (the label), ``hour`` and 21 categorical columns.

``id`` is a per-row 64-bit id, and many ids do not fit in an int64. It is ignored by default, since it
never repeats; ``keep_id=True`` keeps it as a categorical column hashed from its digits (kind ``str``): kind
``int`` takes int64's tokens only, so it would make those lines bad.
"""
from gpuemb.io.reader import ReadOptions, TextReader
from gpuemb.io.schema import Schema

NAMES = ("id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category", "app_id",
         "app_domain", "app_category", "device_id", "device_ip", "device_model", "device_type", "device_conn_type",
         "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21")


def avazu_schema(keep_id=False):
    """The Avazu schema: every column but ``id`` and ``click`` categorical, hashed as strings."""
    categorical = [n for n in NAMES if n not in ("id", "click")]
    if keep_id:
        categorical.insert(0, "id")
    return Schema.from_roles(NAMES, ["click"], (), categorical, header=True)


def read_avazu(paths, keep_id=False, options=ReadOptions()):
    """A streaming reader of Avazu CSV files."""
    return TextReader(paths, avazu_schema(keep_id), options)
