"""CRC32 checksums of chunks of arrays and of attribute values: what a file's writer records and its reader checks.

A chunk's checksum is the CRC32 of each of its arrays' bytes in C order, so it does not depend on how the file
stores them (HDF5 chunking, compression). An attribute's checksum is the CRC32 of its value as text, as h5py reads
it back, so a writer computes it from the value it stored.
"""
import zlib

import numpy as np


def array_crcs(arrays):
    """The CRC32 of each array's bytes in C order (0 for an empty one)."""
    return [zlib.crc32(np.ascontiguousarray(a)) for a in arrays]


def first_mismatch(arrays, names, recorded):
    """``(name, crc, recorded crc)`` of the first array whose CRC32 is not the recorded one, or None."""
    for name, crc, want in zip(names, array_crcs(arrays), recorded):
        if crc != int(want):
            return name, crc, int(want)
    return None


def value_crc(value):
    """The CRC32 of an attribute's value as text (``str`` of what h5py reads: a string, or an integer)."""
    return zlib.crc32(str(value).encode("utf-8", "surrogateescape"))
