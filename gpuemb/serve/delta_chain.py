"""A training run's deltas as a server reads them (docs/serve.md, "Following a training run").

``tools/train.py --delta-every N --delta-dir D`` (``gpuemb/train/deltas.py``) writes into D, per delta,
``delta-<step>.h5`` (the rows changed and keys dropped since the delta before: a snapshot of kind delta; on W ranks
one file a rank, ``delta-<step>.rank<r>-of-<W>.h5``, of its shards) and ``delta-<step>.onnx`` (the dense part then),
and rewrites ``deltas.json``, the index: ``{"body": {format, version, chain, first, deltas: [{step, since,
checkpoint, tables, graph: {file, sha256}}]}, "crc32"}``, the deltas in order, each starting at the step the one
before ends at (``first`` for the first); ``tables`` is ``{file, id}``, or ``{ranks: [{file, id}, ...]}`` in rank
order for a delta of several ranks (version 2; version 1 has no such entry, and reads as before).

``read_delta`` reads one delta with what the index says of it: its step and the step it starts from, the chain
(one run's deltas, across its resumes), and its parts checked: each table file's seal and chunks (by the store's own
reader, imported here only: ``predict`` never loads the store), its snapshot id against the index's (a file of
another run copied in is refused), and the graph's SHA-256; a sharded delta's files are joined into whole tables
(``delta_join.py``). Anything wrong is one BundleError line.
"""
import hashlib
import json
import os
import zlib
from typing import NamedTuple

import onnx

from .delta_join import join_tables
from .errors import BundleError

INDEX, FORMAT, VERSION = "deltas.json", "gpuemb-deltas", 2
READS = (1, VERSION)  # version 1: every delta in one file


def delta_file(step, ext="h5"):
    """The name of the delta of ``step``: its table file (``h5``) or its graph (``onnx``)."""
    return f"delta-{step:09d}.{ext}"


def rank_file(step, rank, world_size):
    """The name of rank ``rank`` of ``world_size``'s table file of the delta of ``step``."""
    return f"delta-{step:09d}.rank{rank}-of-{world_size}.h5"


def table_files(entry):
    """``[{file, id}]``: the table files of an index entry, one or one a rank (in rank order)."""
    return entry["tables"].get("ranks") or [entry["tables"]]


def _is_file(f):
    return isinstance(f, dict) and isinstance(f.get("file"), str) and isinstance(f.get("id"), str)


def index_crc(body):
    """The CRC32 of the index's body (its canonical JSON), which guards it."""
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


class Delta(NamedTuple):
    """One delta: ``tables`` ``{name: (keys [n], weights [n, dim] float32, deleted keys [m])}`` and the dense part
    (``graph``, an ``onnx.ModelProto``) at ``step``; it applies to a state at step ``since`` of ``chain``."""
    path: str
    chain: str
    since: int
    step: int
    tables: dict
    graph: object


def _entries(body, path):
    """The index's entries, checked to be what the writer writes, in order."""
    ok = isinstance(body.get("chain"), str) and type(body.get("first")) is int and isinstance(body.get("deltas"),
                                                                                              list)
    last = body.get("first")
    for e in body.get("deltas") if ok else ():
        ok = isinstance(e, dict) and type(e.get("step")) is int and e.get("since") == last and e["step"] > last \
            and isinstance(e.get("tables"), dict) and isinstance(e.get("graph"), dict) and all(
                isinstance(e["graph"].get(k), str) for k in ("file", "sha256"))
        ranks = ok and e["tables"].get("ranks")
        ok = ok and (_is_file(e["tables"]) if ranks is None else isinstance(ranks, list) and len(ranks) > 0
                     and all(map(_is_file, ranks)))
        if not ok:
            break
        last = e["step"]
    if not ok:
        raise BundleError(f"{path}: is not an index gpuemb writes (a chain id, and deltas each starting where the "
                          "one before ends); the training run's --delta-dir is damaged")
    return body["deltas"]


def read_index(directory):
    """``(chain, entries)`` of the index of ``directory``, a training run's --delta-dir."""
    path = os.path.join(os.fspath(directory), INDEX)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(1 << 26))
        body = doc["body"]
        ok = index_crc(body) == doc["crc32"] and body.get("format") == FORMAT
    except FileNotFoundError:
        raise BundleError(f"{path}: is missing; give the --delta-dir of a run with --delta-every") from None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise BundleError(f"{path}: cannot be read ({type(e).__name__}: {e}); the index is damaged") from None
    if not ok:
        raise BundleError(f"{path}: its checksum or format is not a delta index's; the index is damaged")
    if body.get("version") not in READS:
        raise BundleError(f"{path}: is version {body.get('version')!r}, not one of {READS}; follow it with the "
                          "gpuemb that wrote it")
    return body["chain"], _entries(body, path)


def read_delta(path, dims):
    """The ``Delta`` whose table file (or one of whose rank files) is ``path`` (in a --delta-dir, beside its index),
    its tables checked to be the bundle's ``dims`` (``{name: dim}``)."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    chain, entries = read_index(folder)
    entry = next((e for e in entries if any(f["file"] == os.path.basename(path) for f in table_files(e))), None)
    if entry is None:
        raise BundleError(f"{path}: its folder's {INDEX} does not list it; give a delta of that folder")
    from gpuemb.store.snapshot import SnapshotError, read_snapshot  # the store's checks, loaded only to follow
    try:
        snaps = []
        for f in table_files(entry):
            snap = read_snapshot(os.path.join(folder, f["file"]))
            if snap.kind != "delta" or snap.id != f["id"]:
                raise BundleError(f"{snap.path}: is snapshot {snap.id[:8]} of kind {snap.kind}, but the index lists "
                                  f"delta {f['id'][:8]}; the file is of another run, copy the run's folder whole")
            snaps.append(snap)
        tables = join_tables(snaps, dims)
    except SnapshotError as e:
        raise BundleError(f"{e}") from None
    graph_path = os.path.join(folder, entry["graph"]["file"])
    try:
        with open(graph_path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != entry["graph"]["sha256"]:
            raise ValueError("its SHA-256 is not the index's")
        graph = onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001  a missing file, damaged bytes, or protobuf's own errors on them
        raise BundleError(f"{graph_path}: cannot be read ({type(e).__name__}: {e}); the delta is damaged") from None
    return Delta(path, chain, entry["since"], entry["step"], tables, graph)
