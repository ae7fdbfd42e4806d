"""A shard's attributes read back: each checked for its form and, from version 2, against its recorded checksum.

Shards come from disks and copies that can flip bytes, and from anyone's HDF5 tool, so no attribute is trusted: a
missing, unreadable, mistyped or altered one is a :class:`ShardError` naming the file and the attribute, never
h5py's, json's or Python's own exception (a KeyError, a ZeroDivisionError on ``chunk_rows=0``, a RecursionError
on deeply nested JSON).
"""
import json
import numbers

import numpy as np

from gpuemb.io.checksum import value_crc
from gpuemb.io.errors import ShardError

FIX = "convert the source again"
# The attributes the checksums in ATTR_CRCS cover, with the checksum table (the dataset "checksums").
CHECKED = ("format", "version", "n_rows", "chunk_rows", "label_names", "dense_names", "sparse_names",
           "sparse_hotness", "meta")
ATTR_CRCS = "attr_crcs"
MAX_TEXT = 60_000  # under HDF5's 64 KiB limit on a message in an object header, with room for the rest
_READ_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)


def put_text(attrs, name, text):
    """Store ``text`` as a fixed-length string, held in the attribute itself: h5py stores a str as a variable-length
    string in the file's global heap, and libhdf5 can loop forever reading a heap with a flipped byte. An attribute
    held so must fit in HDF5's 64 KiB object header message (see check_texts)."""
    attrs[name] = np.bytes_(text.encode())


def check_texts(texts):
    """A ValueError, before anything is written, where a text of ``{name: text}`` is too long for put_text."""
    for name, text in texts.items():
        if len(text.encode()) > MAX_TEXT:
            raise ValueError(f"shard attribute {name!r}: {len(text.encode())} bytes of text, more than the "
                             f"{MAX_TEXT} a shard keeps in an attribute; keep ShardLayout.meta and the column names "
                             "shorter")


def decoded(value):
    """An attribute's value with text as str (a shard stores text as bytes, see put_text)."""
    return value.decode() if isinstance(value, bytes) else value


def raw(f, name, path):
    """The value of attribute ``name`` (text decoded), or a ShardError saying it is missing or unreadable."""
    try:
        if name not in f.attrs:
            raise ShardError(f"{path}: attribute {name!r} is missing, so this is not a complete gpuemb shard; {FIX}")
        return decoded(f.attrs[name])
    except _READ_ERRORS as e:
        if isinstance(e, ShardError):
            raise
        raise ShardError(f"{path}: attribute {name!r} cannot be read ({type(e).__name__}: {e}); the file is "
                         f"corrupt, so {FIX}") from None


def integer(f, name, path, low):
    """Attribute ``name`` as an int >= ``low``."""
    value = raw(f, name, path)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ShardError(f"{path}: attribute {name!r} is {show(value)}, not an integer >= {low}; the file is "
                         f"corrupt, so {FIX}")
    return int(value)


def json_value(f, name, path, fits, what):
    """Attribute ``name`` decoded from JSON, where ``fits(value)`` says it is ``what``."""
    text = raw(f, name, path)
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        value = None
    if value is None or not fits(value):
        raise ShardError(f"{path}: attribute {name!r} is {show(text)}, not {what}; the file is corrupt, so {FIX}")
    return value


def names(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def counts(value, low=1):
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in value)


def record_crcs(attrs, table_crc):
    """The JSON text of ATTR_CRCS: the checksum of each CHECKED attribute, and ``table_crc`` of the checksum table."""
    return json.dumps({**{name: value_crc(decoded(attrs[name])) for name in CHECKED}, "checksums": table_crc})


def check_crcs(f, path, table_crc):
    """A ShardError naming the first CHECKED attribute (or the checksum table) whose checksum is not recorded."""
    recorded = json_value(f, ATTR_CRCS, path, lambda v: isinstance(v, dict) and all(
        isinstance(v.get(k), int) for k in CHECKED + ("checksums",)), "a JSON object of checksums")
    for name in CHECKED:
        crc = value_crc(raw(f, name, path))
        if crc != recorded[name]:
            raise ShardError(f"{path}: attribute {name!r} has checksum {crc:#010x}, but {ATTR_CRCS} recorded "
                             f"{recorded[name]:#010x}; the attribute (or its checksum) is corrupt, so {FIX}")
    if table_crc != recorded["checksums"]:
        raise ShardError(f"{path}: dataset 'checksums' has checksum {table_crc:#010x}, but {ATTR_CRCS} recorded "
                         f"{recorded['checksums']:#010x}; the checksum table is corrupt, so {FIX}")


def show(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
