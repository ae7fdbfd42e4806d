"""Snapshot files changed the ways the tests need: edited and sealed again, so the checks behind the seal see the
edit; written as the older versions wrote them; a byte flipped."""
from contextlib import contextmanager

import h5py
import numpy as np

from gpuemb.store.snapshot import VERSION, TableSnapshot
from gpuemb.store.snapshot.format import ATTRS_CRC, attrs_crc
from gpuemb.store.snapshot.seal import seal


def with_extras(rng, n=150):
    """A table of ``n`` fresh random rows and steps, its keys' ticks and 20 other keys' pending counts."""
    keys = rng.permutation(10 * n)[:n].astype(np.int64)
    pending = np.stack([10 * n + rng.permutation(n)[:20], rng.integers(1, 3, 20), rng.integers(0, 9, 20)], 1)
    return TableSnapshot({"dim": 4}, {"weights": [0, 4], "sum_sq": [4, 5]}, keys,
                         rng.standard_normal((n, 5)).astype(np.float32), rng.integers(1, 100, n).astype(np.int32),
                         extras={"pending": pending, "ticks": np.stack([keys, rng.integers(0, 50, n)], 1)})


@contextmanager
def resealed(path):
    """``with resealed(path) as f:`` edits the snapshot with h5py, then seals it again, as a tool that rewrote it
    whole would: what the reader finds then is the edit, not a broken seal."""
    with h5py.File(path, "a") as f:
        yield f
    seal(path, VERSION)


def as_version(path, out, version):
    """Write the snapshot at ``path`` to ``out`` as ``version`` (1 or 2) wrote it: no seal, HDF5's earliest format
    (a group's links in a local heap), text attributes as variable-length strings, no ``extras`` attribute, and for
    version 1 no attribute checksum either."""
    def attrs(src, dst):
        for k, v in src.attrs.items():
            if k != "extras":
                dst.attrs[k] = v.decode() if isinstance(v, bytes) else v

    with h5py.File(path, "r") as src, h5py.File(out, "w") as dst:
        attrs(src, dst)
        for name, g in src["tables"].items():
            copy = dst.create_group(f"tables/{name}")
            attrs(g, copy)
            for k, ds in g.items():
                copy.create_dataset(k, data=ds[...], chunks=ds.chunks, maxshape=ds.maxshape)
        dst.attrs["version"] = version
        if version == 1:
            del dst.attrs[ATTRS_CRC]
        else:
            dst.attrs[ATTRS_CRC] = attrs_crc(dst)
    return out


def flip(path, offset, mask=0xFF):
    """XOR the byte at ``offset`` of the file with ``mask``."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([b ^ mask]))
