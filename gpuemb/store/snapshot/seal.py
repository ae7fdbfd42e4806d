"""The seal of a snapshot (version 3): a whole-file checksum that is checked with plain reads before h5py parses
anything, so no damaged byte ever reaches libhdf5, which crashed or looped forever on some (a fuzzer's flipped
bytes in a variable-length string's global heap).

The file starts with an HDF5 user block of ``USERBLOCK`` bytes, which HDF5 leaves alone. After the HDF5 file is
closed, the writer puts ``HEAD`` at its start: ``MAGIC``, the format version, and the CRC32 and the length of the
rest of the file; the rest of the block is zeros. A file that starts with HDF5's own signature has no seal: it is
an older snapshot (versions 1 and 2), read as before.

Checking streams the file in ``BLOCK``-byte reads, so it holds no more of a large snapshot than that. The check
returns the file's ``stamp`` (device, inode, size, modification time); a reader that opens the file again compares
the stamp of what it opened instead of reading the whole file once more. Cost (docs/store.md, "The seal"): from
the page cache of the 2-core development machine, checking and sealing a 532 MB snapshot ran at 2.4-2.9 GB/s.
"""
import os
import struct
import zlib
from dataclasses import dataclass

from .format import RESTORE, SnapshotError

USERBLOCK = 512  # the smallest user block HDF5 allows
MAGIC = b"GPUEMB-SNAPSHOT\n"
HEAD = struct.Struct("<16sIIQ")  # MAGIC, version, CRC32 of the rest, length of the rest
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
BLOCK = 1 << 22


@dataclass(frozen=True)
class Sealed:
    """What checking a file found: the version its seal names (None: an older snapshot, without one), and its
    stamp."""
    version: int | None
    stamp: tuple


def stamp_of(st):
    """What says a file is the one that was checked: an ``os.stat_result``'s device, inode, size and mtime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _crc_from(fh, start):
    """CRC32 and length of the bytes of the open file ``fh`` from ``start`` to its end, read ``BLOCK`` at a time."""
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    fh.seek(start)
    crc, n = 0, 0
    while (got := fh.readinto(buf)) > 0:
        crc, n = zlib.crc32(view[:got], crc), n + got
    return crc, n


def seal(path, version):
    """Write the seal into the user block of the closed HDF5 file at ``path``: the CRC32 of what follows it."""
    with open(path, "r+b") as fh:
        crc, n = _crc_from(fh, USERBLOCK)
        fh.seek(0)
        fh.write(HEAD.pack(MAGIC, version, crc, n).ljust(USERBLOCK, b"\0"))


def check_seal(path, versions):
    """The file at ``path`` checked against its seal, whose version must be one of ``versions``; a SnapshotError
    says what does not match. A file without a seal (one that starts as HDF5 does) passes unchecked."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            block = fh.read(USERBLOCK)
            if block.startswith(HDF5_SIGNATURE):
                return Sealed(None, stamp_of(st))
            if len(block) < USERBLOCK or not block.startswith(MAGIC):
                raise SnapshotError(f"{path}: starts with neither a gpuemb snapshot's seal nor HDF5's signature; "
                                    f"the file is not a snapshot, or its first bytes are corrupt, so {RESTORE}")
            _, version, crc, n = HEAD.unpack_from(block)
            if version not in versions:
                raise SnapshotError(f"{path}: sealed as snapshot version {version}, but this gpuemb reads sealed "
                                    f"version {' or '.join(map(str, versions))}; read it with the gpuemb that wrote "
                                    "it, or the seal is corrupt")
            if any(block[HEAD.size:]):
                raise SnapshotError(f"{path}: its seal's padding is not zeros; the seal is corrupt, so {RESTORE}")
            if st.st_size - USERBLOCK != n:
                raise SnapshotError(f"{path}: is {st.st_size} bytes, but its seal says {n + USERBLOCK}; the file "
                                    f"is truncated or was appended to, so {RESTORE}")
            got, read = _crc_from(fh, USERBLOCK)
    except OSError as e:
        raise SnapshotError(f"{path}: cannot be read ({e.strerror or e}); check the file and its permissions, "
                            f"or {RESTORE}") from None
    if (got, read) != (crc, n):
        raise SnapshotError(f"{path}: the CRC32 of its {read} bytes after the seal is {got:#010x}, but the seal "
                            f"recorded {crc:#010x} of {n}; the file is corrupt, so {RESTORE}")
    return Sealed(version, stamp_of(st))
