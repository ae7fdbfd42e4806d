"""The manifest of a converted split folder: which shards make the data set, so that a missing, extra or swapped
shard is noticed before a run trains on it.

``<out>/<split>/manifest.json``, written by the converter and the synthetic generator once every shard of the
split is complete (to ``manifest.json.tmp``, synced, then renamed)::

    {"format": "gpuemb-manifest", "version": 1, "dataset": "<32 hex digits>", "split": "train", "complete": true,
     "shards": [{"file": "part-00000.h5", "rows": 2097152, "bytes": 553649216, "crc32": 2857327329}, ...],
     "checksum": 1530475112}

``dataset`` is one random id per conversion, the same in each split's manifest. ``crc32`` is the CRC32 of the
whole shard file. ``checksum`` is the CRC32 of the other fields written as compact JSON with sorted keys. Before a
split's first shard is written its folder gets a manifest with ``"complete": false`` and no shards, so the folder
of a conversion that stopped is refused rather than trained on.

Reading checks the listing (every listed shard is there, and no other ``part-*.h5``) and, before h5py parses a
byte of a shard, its size and whole-file CRC32 against its entry: h5py is never handed bytes nobody checked.
"""
import glob
import json
import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from gpuemb.io.errors import DataError, ShardError

NAME = "manifest.json"
FORMAT, VERSION = "gpuemb-manifest", 1
MAX_BYTES = 64 << 20  # about 700,000 shards: far past any data set, and a bound on what a hostile file costs
BLOCK = 4 << 20  # bytes read at a time for a file's CRC32
_PART = re.compile(r"part-[0-9]{5,9}\.h5")
_ID = re.compile(r"[0-9a-f]{32}")
_FIX = "convert the source again (tools/convert.py --overwrite)"


def _count(v, limit=1 << 63):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit


# Each field's test and what it must be; json.loads gives only dicts, lists, str, int, float, bool and None.
_FIELDS = {"format": (lambda v: v == FORMAT, repr(FORMAT)), "version": (lambda v: _count(v) and v == VERSION,
                                                                        f"{VERSION}, the version this gpuemb reads"),
           "dataset": (lambda v: isinstance(v, str) and _ID.fullmatch(v), "an id of 32 hex digits"),
           "split": (lambda v: isinstance(v, str) and 0 < len(v) <= 64, "a split name"),
           "complete": (lambda v: isinstance(v, bool), "true or false"),
           "shards": (lambda v: isinstance(v, list), "a list"),
           "checksum": (lambda v: _count(v, 1 << 32), "a CRC32")}
_ENTRY = {"file": (lambda v: isinstance(v, str) and _PART.fullmatch(v), "a shard name like part-00000.h5"),
          "rows": (_count, "a count"), "bytes": (_count, "a count"),
          "crc32": (lambda v: _count(v, 1 << 32), "a CRC32")}


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a manifest: its file name in the folder, rows, size and whole-file CRC32."""
    file: str
    rows: int
    bytes: int
    crc32: int


@dataclass(frozen=True)
class Manifest:
    """What a split folder holds: ``shards`` in order, of the conversion ``dataset``; ``complete`` once written."""
    dataset: str
    split: str
    complete: bool
    shards: tuple = ()

    def to_json(self):
        body = {"format": FORMAT, "version": VERSION, **asdict(self), "shards": [asdict(e) for e in self.shards]}
        return {**body, "checksum": _checksum(body)}


def _checksum(body):
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _show(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(value, fields, path, where):
    """``value`` (``where`` in the manifest) as a dict holding exactly ``fields``, each passing its test; a
    ShardError names the first that does not."""
    if not isinstance(value, dict) or set(value) != set(fields):
        raise ShardError(f"{path}: {where} is {_show(value)}, not an object of the fields {', '.join(fields)}; "
                         f"the manifest is damaged, so {_FIX}")
    for name, (fits, what) in fields.items():
        if not fits(value[name]):
            raise ShardError(f"{path}: {where}'s field {name!r} is {_show(value[name])}, not {what}; the manifest is "
                             f"damaged, so {_FIX}")
    return value


def parse(value, path):
    """The Manifest of JSON ``value`` read from ``path``, checked for its form and its checksum."""
    top = _checked(value, _FIELDS, path, "the manifest")
    shards = [_checked(e, _ENTRY, path, f"shard {i}") for i, e in enumerate(top["shards"])]
    body = {k: v for k, v in top.items() if k != "checksum"}
    if _checksum(body) != top["checksum"]:  # every field is flat now, so writing it again cannot recurse deeply
        raise ShardError(f"{path}: its fields have checksum {_checksum(body):#010x}, but it recorded "
                         f"{top['checksum']:#010x}; the manifest is damaged, so {_FIX}")
    names = [e["file"] for e in shards]
    if len(set(names)) != len(names):
        raise ShardError(f"{path}: lists a shard twice; the manifest is damaged, so {_FIX}")
    return Manifest(top["dataset"], top["split"], top["complete"], tuple(ShardEntry(**e) for e in shards))


def read(folder):
    """The Manifest of split folder ``folder``, or None where it has none (converted before manifests)."""
    path = os.path.join(folder, NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ShardError(f"{path}: cannot be read ({e.strerror}); check the path and its permissions") from None
    if len(raw) > MAX_BYTES:
        raise ShardError(f"{path}: more than {MAX_BYTES} bytes, far more than a manifest; the file is damaged or "
                         f"not a manifest, so {_FIX}")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ShardError(f"{path}: is not JSON ({type(e).__name__}: {_show(str(e))}); the manifest is damaged, "
                         f"so {_FIX}") from None
    return parse(value, path)


def write(folder, manifest):
    """Write ``manifest`` to ``folder`` at once or not at all: a temp file, synced, renamed over the old one."""
    path = os.path.join(folder, NAME)
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(manifest.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        fd = os.open(folder, os.O_RDONLY)  # the rename itself survives a crash once the folder is synced
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise DataError(f"{path}: cannot be written ({e.strerror}); free space on that disk, or convert into a "
                        "writable folder") from None


def file_crc(path, sync=False):
    """``(bytes, CRC32)`` of the whole file at ``path``, read ``BLOCK`` bytes at a time; ``sync`` also flushes it
    to the disk, as the writer does before a manifest vouches for it."""
    crc, size, buf = 0, 0, bytearray(BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
            size += n
        if sync:
            os.fsync(f.fileno())
    return size, crc


def describe(path, rows):
    """The ShardEntry of a shard just written, synced to the disk."""
    size, crc = file_crc(path, sync=True)
    return ShardEntry(os.path.basename(path), rows, size, crc)


def _complete(folder, manifest):
    """``manifest``, or a ShardError where the conversion that wrote it has not finished."""
    if not manifest.complete:
        raise ShardError(f"{os.path.join(folder, NAME)}: the conversion writing this folder has not finished (it "
                         "stopped, failed, or is still running), so its shards are not a whole data set; wait for "
                         f"it, or {_FIX}")
    return manifest


def _unlisted(path, where):
    return ShardError(f"{path}: is not in {where}, so it is not part of this data set (left by an earlier "
                      f"conversion, or copied in); remove it, or {_FIX}")


def listed(folder, manifest):
    """The paths of the shards ``manifest`` lists, after checking that ``folder`` holds exactly those."""
    path = os.path.join(folder, NAME)
    names = [e.file for e in _complete(folder, manifest).shards]
    present = {os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(folder), "part-*.h5"))}
    missing = [n for n in names if n not in present]
    if missing:
        raise ShardError(f"{os.path.join(folder, missing[0])}: is missing ({len(missing)} of the {len(names)} shards "
                         f"listed in {path} are), so the data set is incomplete; restore the files, or {_FIX}")
    extra = sorted(present - set(names))
    if extra:
        raise _unlisted(os.path.join(folder, extra[0]), f"{path} ({len(extra)} such files)")
    return [os.path.join(folder, n) for n in names]


def _check_file(path, entry, where):
    """A ShardError where the file at ``path`` is not the size and CRC32 of its manifest entry."""
    try:
        size = os.path.getsize(path)  # a wrong size is known without reading the file
        size, crc = file_crc(path) if size == entry.bytes else (size, None)
    except OSError as e:
        raise ShardError(f"{path}: cannot be read ({e.strerror}); check the path and its permissions") from None
    if (size, crc) != (entry.bytes, entry.crc32):
        got = f"{size} bytes" if crc is None else f"CRC32 {crc:#010x}"
        want = f"{entry.bytes} bytes" if crc is None else f"{entry.crc32:#010x}"
        raise ShardError(f"{path}: {got}, but {where} recorded {want}; the file is truncated or corrupt, or "
                         f"another conversion's, so restore it, or {_FIX}")


class ShardCheck:
    """Checks shard files against their folders' manifests, reading each folder's manifest once; ``unlisted``
    gathers the folders without one."""

    def __init__(self):
        self.entries, self.unlisted = {}, []  # per folder, its manifest's entries by file name, or None

    def _entry(self, path):
        """``(entry, manifest path)`` of shard ``path``, or None where its folder has no manifest; a ShardError
        where the manifest does not list it."""
        folder, name = os.path.split(path)
        folder = folder or "."
        if folder not in self.entries:
            manifest = read(folder)
            self.entries[folder] = manifest and {e.file: e for e in _complete(folder, manifest).shards}
            if manifest is None:
                self.unlisted.append(folder)
        if self.entries[folder] is None or not os.path.isfile(path):  # a missing file is open_shard's to name
            return None
        where = os.path.join(folder, NAME)
        entry = self.entries[folder].get(name)
        if entry is None:
            raise _unlisted(path, where)
        return entry, where

    def __call__(self, paths):
        """Check the size and whole-file CRC32 of each shard of ``paths`` against its manifest entry, where its
        folder has a manifest; a ShardError names the first that differs or is not listed."""
        listed = [(p, *e) for p in map(os.fspath, paths) if (e := self._entry(p)) is not None]
        # Several files at once: zlib lets go of the GIL, and a data set is read whole here before training
        # (measured in docs/data.md), so a host with cores and disks to spare starts sooner.
        with ThreadPoolExecutor(min(8, os.cpu_count() or 1, max(len(listed), 1))) as pool:
            list(pool.map(lambda job: _check_file(*job), listed))


def one_conversion(*folders):
    """A ShardError where split folders that should be one data set have manifests of different conversions."""
    listings = [(f, read(f)) for f in folders]
    listings = [(f, m) for f, m in listings if m is not None]
    for folder, m in listings[1:]:
        if m.dataset != listings[0][1].dataset:
            raise ShardError(f"{folder}: is from another conversion than {listings[0][0]} (their {NAME} name data "
                             f"sets {m.dataset} and {listings[0][1].dataset}), so the splits are not one data set; "
                             f"{_FIX}")
