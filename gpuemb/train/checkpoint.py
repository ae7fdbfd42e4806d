"""Checkpoints: everything a run needs to continue bit for bit, written atomically, checked before it is loaded.

A checkpoint is a folder ``<checkpoint-dir>/step-<N>`` of these files:

- ``state.h5`` (plain HDF5): ``model/<parameter>`` arrays, ``optimizer/<parameter>/<state>`` arrays, and JSON
  attributes ``optimizer`` (rule, schedule, step counts), ``module_state`` (modules' extra state: the dropout
  counters), ``loader`` (epoch and position), ``trainer`` (step, samples, the loss window of the next train
  record);
- the tables' rows (``gpuemb.store.snapshot``; CRC32 per chunk): in a world of one, where the tables are whole,
  ``embeddings.h5``, one snapshot of every table; on W ranks, each rank's shard files
  ``<collection>.rank<r>-of-<W>.h5`` (``gpuemb.distributed.save_sharded``), and the manifest says ``sharded``;
- ``manifest.json``: the step, the checkpoint's token (the random hex of its temporary folder, also in the meta of
  every table file), the config (by sections; flat in checkpoints written before the config had sections), and
  each file's size and CRC32, with a CRC32 of the manifest itself. Checkpoints written before every file had its
  CRC32 kept only ``state.h5``'s, and still load.

One writer serves every world size: rank 0 makes a temporary folder beside the target, every rank writes its
tables' files into it, then rank 0 the state and the manifest, fsyncs, renames the folder into place, and only
then does ``<checkpoint-dir>/latest`` (a one-line file, replaced atomically) name it; if any rank fails, every
rank raises and the folder is removed; a write that fails (a full disk) is one CheckpointError naming the
folder and the file. A run killed at any moment leaves ``latest`` naming a complete checkpoint, and leftovers that
the next run clears (``checkpoint_dir``).
A checkpoint loads into any world size: whole tables or shards, each rank takes the keys its plan gives it. Loading
checks the manifest, the size and whole-file CRC32 of every file before h5py parses it, that each table file
holds the step and token of this manifest (a file of another checkpoint copied in is refused, however whole), and
the type of every attribute, before it changes anything; it raises :class:`CheckpointError` naming the file that is
wrong. A resume from a checkpoint dir that finds its newest checkpoint incomplete or corrupt says so and takes the
newest one before it that checks out.
"""
import errno
import json
import os
import shutil
import sys
import uuid
import zlib
from datetime import datetime, timezone

import h5py
import numpy as np

from gpuemb.distributed import ShardedEmbeddingCollection, load_sharded, load_sharded_tables, save_sharded, \
    shard_path
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.autograd.plain import plain
from gpuemb.store.snapshot import SnapshotError, fsync, read_snapshot, save_snapshot
from gpuemb.store.snapshot.format import parse_json
from gpuemb.io.h5output import H5Output

from .config import flag, resume_differences
from .checkpoint_dir import LATEST, MANIFEST, STEP, latest_name, remove_folder, step_folders
from .errors import CheckpointError, DivergedError, ResumeError
from .model import collections_of, embedding_tables

FORMAT, VERSION = "gpuemb-checkpoint", 1
STATE, EMBEDDINGS = "state.h5", "embeddings.h5"
FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # the errors of a disk without room


def _crc32(path):
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _body_crc(body):
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


# -- writing ---------------------------------------------------------------------------------------------------
def write_state(path, state):
    """``state.h5`` from the trainer's and loop's state dicts."""
    optimizer = state["trainer"]["optimizer"]
    with H5Output(path) as out:
        f = out.file
        f.attrs["format"], f.attrs["version"] = FORMAT + "-state", VERSION
        for name, value in state["trainer"]["model"].items():
            f.create_dataset(f"model/{name}", data=value)
        for name, arrays in optimizer["params"].items():
            for key, value in arrays.items():
                if key != "step":
                    f.create_dataset(f"optimizer/{name}/{key}", data=value)
            out.check()
        scalars = {"rule": optimizer["rule"], "schedule": optimizer["schedule"], "step_count":
                   optimizer["step_count"], "steps": {n: a["step"] for n, a in optimizer["params"].items()}}
        trainer = {"step": state["trainer"]["step"], "samples": state["trainer"]["samples"], **state["loop"]}
        for name, value in (("optimizer", scalars), ("module_state", state["trainer"]["module_state"]),
                            ("loader", state["loader"]), ("trainer", trainer)):
            f.attrs[name] = json.dumps(plain(value, f"{path}: {name}"))
    fsync(path)


class FiniteRows:
    """A table whose export refuses rows holding NaN or inf, so that no checkpoint keeps a diverged row."""

    def __init__(self, name, table):
        self.name, self.table = name, table

    def __getattr__(self, attr):
        return getattr(self.table, attr)

    def export(self, keys=None, chunk=1 << 16):
        for k, rows, steps in self.table.export(keys, chunk):
            # the working rows: a float16 table stores its float32 state as pairs of 16-bit halves, which read as
            # float16 may look like NaN or inf while the state is finite
            bad = ~np.isfinite(self.table.format.unpack(rows)).all(axis=1)
            if bad.any():
                raise DivergedError(f"table {self.name!r}: the row of key {int(k[bad][0])} (and {int(bad.sum()) - 1} "
                                    "more in its chunk) holds NaN or inf")
            yield k, rows, steps


def folder_names(directory, step, token):
    """``(name, final, tmp)``: the checkpoint of ``step``'s folder name, its path, and the temporary folder it is
    written in (``token``, a random hex string rank 0 draws, tells two writers apart)."""
    name = f"step-{step:09d}"
    return name, os.path.join(directory, name), os.path.join(directory, f".{name}.tmp-{token}")


def file_entry(path):
    """What the manifest records of a file: its size and CRC32."""
    return {"bytes": os.path.getsize(path), "crc32": _crc32(path)}


def write_manifest(tmp, step, config, files, **extra):
    """``manifest.json`` in ``tmp``: the step, the config, ``files`` (name: ``file_entry``) and ``extra``."""
    body = {"format": FORMAT, "version": VERSION, "step": step, "files": files, "config": config.to_dict(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **extra}
    with open(os.path.join(tmp, MANIFEST), "w") as f:
        json.dump({"body": body, "crc32": _body_crc(body)}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def publish(directory, name, final, tmp, keep):
    """Rename the complete ``tmp`` to ``final``, point ``latest`` at it, keep the ``keep`` newest checkpoints."""
    fsync(tmp)
    if os.path.exists(final):  # the same step again (a resume from an older checkpoint): replace it whole
        old = os.path.join(directory, f".{name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    fsync(directory)
    _point_latest(directory, name)
    _prune(directory, keep, name)


def save_checkpoint(directory, step, config, state, model, cluster, keep=2, data=None):
    """Write the checkpoint of ``step`` under ``directory`` and point ``latest`` at it; returns its path on every
    rank (every rank must call it). ``state``: ``{"trainer": Trainer.state_dict(), "loader": ..., "loop": {...}}``;
    ``model``: whole or sharded tables; ``cluster``: ``cluster.Cluster``; ``data``: the run's ``DataSet``, whose
    shape the manifest records (``data_shape``), so the model can be rebuilt without the data (an export). Then
    removes all but the ``keep`` newest checkpoints. A row holding NaN or inf raises DivergedError, and nothing is
    written.
    """
    name, final, tmp = cluster.new_folder(directory, step, folder_names)
    try:
        try:
            token = tmp.rsplit("-", 1)[1]  # folder_names' last part: the same on every rank
            files, sharded = _write_tables(model, tmp, {"step": step, "checkpoint": token}, cluster)
            error = None
            if cluster.lead:
                try:
                    write_state(os.path.join(tmp, STATE), state)
                    entries = {f: file_entry(os.path.join(tmp, f)) for f in (STATE, *files)}
                    extra = {"checkpoint": token, **({"sharded": sharded} if sharded else {})}
                    if data is not None:
                        extra["data_shape"] = {"n_dense": data.n_dense, "sparse_names": list(data.sparse_names),
                                               "label_names": list(data.label_names),
                                               "sparse_hotness": list(data.train.layout.hotness)}
                    write_manifest(tmp, step, config, entries, **extra)
                    publish(directory, name, final, tmp, keep)
                except Exception as e:  # raised below, once the other ranks know
                    error = e
            if not cluster.everywhere(error is None):
                if error is not None:
                    raise error
                raise CheckpointError(f"rank 0 could not finish the checkpoint of step {step} in {directory} (its "
                                      "error says why)")
        except (OSError, SnapshotError) as e:
            raise CheckpointError(_not_written(directory, step, e)) from None
    except BaseException:
        if cluster.lead:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _not_written(directory, step, e):
    """The line that says a checkpoint could not be written, what was kept, and what to do."""
    kept = latest_name(directory)
    kept = f"the last checkpoint, {os.path.join(directory, kept)}, is whole" if kept else "no checkpoint was kept"
    if getattr(e, "errno", None) in FULL:
        do = "free space on that disk (or pass a --checkpoint-dir on a larger one) and --resume from the last " \
             "checkpoint"
    else:
        do = "check that the folder is writable, or pass another --checkpoint-dir"
    return f"--checkpoint-dir {directory}: the checkpoint of step {step} could not be written ({e}); {kept}; {do}"


def _write_tables(model, tmp, meta, cluster):
    """Write this rank's tables into ``tmp``, with ``meta`` (the step and token) in each file: ``(every rank's file
    names, the manifest's "sharded" or None)``."""
    sharded = collections_of(model, ShardedEmbeddingCollection)
    if not sharded:  # whole tables, one process
        tables = embedding_tables(model)
        save_snapshot({n: FiniteRows(n, t) for n, t in tables.items()}, os.path.join(tmp, EMBEDDINGS),
                      meta=meta)
        return [EMBEDDINGS], None
    W = cluster.world_size
    for n, collection in sharded:  # each raises on every rank if any rank failed
        save_sharded(collection, os.path.join(tmp, n), meta=meta, wrap=FiniteRows)
    files = [os.path.basename(shard_path(n, r, W)) for n, _ in sharded for r in range(W)]
    return files, {"world_size": W, "collections": [n for n, _ in sharded]}


def _point_latest(directory, name):
    tmp = os.path.join(directory, f".{LATEST}.tmp-{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, LATEST))
    fsync(directory)


def _prune(directory, keep, current):
    done = [n for n in step_folders(directory)[::-1] if os.path.isfile(os.path.join(directory, n, MANIFEST))]
    for name in [n for n in done if n != current][:max(len(done) - keep, 0)]:
        remove_folder(directory, name)


# -- reading ---------------------------------------------------------------------------------------------------
def resume_order(path):
    """``(folders, fallback)``: the checkpoints a resume from ``path`` tries, best first, and whether it may go on
    to the next when one does not check out: ``path`` is a checkpoint (tried alone), or a checkpoint dir (the one
    its ``latest`` names, then the folders before it, newest first)."""
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, MANIFEST)) or STEP.fullmatch(os.path.basename(os.path.normpath(path))):
        return [path], False
    steps = step_folders(path) if os.path.isdir(path) else []
    if not steps and not os.path.isfile(os.path.join(path, LATEST)):
        raise ResumeError(f"{path}: holds no checkpoint (no {MANIFEST} and no {LATEST} file); give a "
                          "step-* folder or the --checkpoint-dir of an earlier run")
    named = latest_name(path)
    if named is not None:
        steps = [named] + [n for n in steps if int(STEP.fullmatch(n)[1]) < int(STEP.fullmatch(named)[1])]
    return [os.path.join(path, n) for n in steps], True


def _warn(line):
    print(f"warning: {line}", file=sys.stderr, flush=True)


def find_resume(path, warn=_warn):
    """``(folder, manifest body)`` of the checkpoint a resume from ``path`` takes (``resume_order``). From a
    checkpoint dir, each checkpoint passed over (incomplete or corrupt) is one line through ``warn``; a
    CheckpointError says when none checks out, or when the one checkpoint named does not."""
    folders, fallback = resume_order(path)
    if fallback and latest_name(path) is None:
        problem = f"{os.path.join(path, LATEST)}: is missing or does not name a step-* folder"
        if not folders:
            raise CheckpointError(f"{problem}, and there is no checkpoint beside it; give a step-* folder "
                                  "by its path")
        warn(f"{problem}; resuming from the newest checkpoint there, {folders[0]}")
    for i, folder in enumerate(folders):
        try:
            return folder, read_manifest(folder)
        except CheckpointError as e:
            if not fallback:
                raise
            if i + 1 == len(folders):
                raise CheckpointError(f"{path}: no checkpoint there checks out; the oldest: {e}") from None
            warn(f"{e}; resuming from {folders[i + 1]}, the checkpoint before it")


def read_manifest(folder):
    """The checked manifest body of the checkpoint in ``folder``; CheckpointError naming what is wrong."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, "rb") as f:
            doc = parse_json(f.read(1 << 26).decode(), "its text")
        body = doc["body"]
        if not isinstance(body, dict):
            raise TypeError(f"its body is {type(body).__name__}, not a table")
        ok = _body_crc(body) == doc["crc32"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: cannot be read ({type(e).__name__}: {e}); the checkpoint is corrupt, "
                              "use another checkpoint") from None
    if not ok:
        raise CheckpointError(f"{path}: its checksum does not match its contents; the checkpoint is corrupt, "
                              "use another checkpoint")
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        raise CheckpointError(f"{path}: format {body.get('format')!r} version {body.get('version')!r}, not "
                              f"{FORMAT!r} version {VERSION}")
    for key in ("files", "config"):  # a manifest that checks out but was written by something else
        if not isinstance(body.get(key), dict):
            raise CheckpointError(f"{path}: its {key!r} is {type(body.get(key)).__name__}, not a table; the "
                                  "manifest was not written by gpuemb, use another checkpoint")
    sharded = body.get("sharded")
    if type(body.get("step")) is not int or body["step"] < 0 or sharded is not None and not (
            isinstance(sharded, dict) and type(sharded.get("world_size")) is int and sharded["world_size"] >= 1
            and isinstance(sharded.get("collections"), list) and all(
                isinstance(n, str) and os.path.basename(n) == n for n in sharded["collections"])):
        raise CheckpointError(f"{path}: its step {body.get('step')!r} or sharded {sharded!r} is not what gpuemb "
                              "writes; the manifest was not written by gpuemb, use another checkpoint")
    for name, want in body["files"].items():
        if os.path.basename(name) != name or not isinstance(want, dict) or type(want.get("bytes")) is not int \
                or type(want.get("crc32", 0)) is not int:
            raise CheckpointError(f"{path}: its entry of file {name!r} is {want!r}, not the file's size and CRC32; "
                                  "the manifest was not written by gpuemb, use another checkpoint")
        file = os.path.join(folder, name)
        if not os.path.isfile(file):
            raise CheckpointError(f"{file}: is missing; the checkpoint is incomplete, use another checkpoint")
        if os.path.getsize(file) != want["bytes"]:
            raise CheckpointError(f"{file}: is {os.path.getsize(file)} bytes, the manifest says {want['bytes']}; "
                                  "the checkpoint is truncated or corrupt, use another checkpoint")
        if "crc32" in want and _crc32(file) != want["crc32"]:
            raise CheckpointError(f"{file}: its CRC32 does not match the manifest's; the checkpoint is corrupt, "
                                  "use another checkpoint")
    for name in body["files"]:
        if name != STATE:
            _check_origin(os.path.join(folder, name), body)
    return body


def _check_origin(path, body):
    """CheckpointError unless the table file at ``path`` was written with this manifest: its meta's step and token
    (checkpoints from before the token have the step only) are the manifest's. Its bytes were checked first."""
    if "checkpoint" in body and type(body["checkpoint"]) is not str:
        raise CheckpointError(f"{os.path.join(os.path.dirname(path), MANIFEST)}: its 'checkpoint' is "
                              f"{body['checkpoint']!r}, not a token; the manifest was not written by gpuemb, resume "
                              "from another checkpoint")
    try:
        meta = read_snapshot(path, verify=False).meta
    except SnapshotError as e:
        raise CheckpointError(f"{e}; use another checkpoint") from None
    keys = ("step", "checkpoint") if "checkpoint" in body else ("step",)
    if any(meta.get(k) != body[k] for k in keys):
        said = lambda d: ", ".join(f"{k} {d.get(k)!r}" for k in keys)  # noqa: E731
        raise CheckpointError(f"{path}: holds the tables of {said(meta)}, but its manifest is of {said(body)}; a "
                              "file of another checkpoint was copied in, use another checkpoint")


def check_config(body, config, folder):
    """ResumeError naming every field where ``config`` differs from the one the checkpoint was saved with."""
    diff = resume_differences(body["config"], config)
    if diff:
        what = "; ".join(f"{flag(k)} was {saved!r}, now {now!r}" for k, saved, now in diff)
        raise ResumeError(f"--resume {folder}: the checkpoint was saved with other settings: {what}. Resume with "
                          "the settings it was saved with")


def read_state(folder):
    """The state dicts saved in ``state.h5`` (the structure ``save_checkpoint`` was given, without the tables),
    each attribute checked to be of the type written."""
    path = os.path.join(folder, STATE)
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: _json_attr(f, k, path) for k in ("optimizer", "module_state", "loader", "trainer")}
            model = {name: np.asarray(ds) for name, ds in _datasets(f["model"])}
            scalars, trainer = attrs["optimizer"], attrs["trainer"]
            steps = scalars.pop("steps", None)
            _expect(isinstance(steps, dict) and all(type(v) is int for v in steps.values()), path, "optimizer",
                    "its 'steps' must map each parameter to an integer")
            params = {name: {"step": step} for name, step in steps.items()}
            if "optimizer" in f:
                for name, ds in _datasets(f["optimizer"]):
                    param, key = name.rsplit("/", 1)
                    params[param][key] = np.asarray(ds)
            _expect(all(type(trainer.get(k)) is int and trainer[k] >= 0 for k in ("step", "samples"))
                    and isinstance(trainer.get("window"), list)
                    and all(type(v) in (int, float) for v in trainer["window"]), path, "trainer",
                    "its 'step' and 'samples' must be counts and its 'window' a list of losses")
            state = {"trainer": {"model": model, "module_state": attrs["module_state"],
                                 "optimizer": {**scalars, "params": params}, "step": trainer.pop("step"),
                                 "samples": trainer.pop("samples")},
                     "loader": attrs["loader"], "loop": trainer}
    except (OSError, KeyError, ValueError, TypeError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{path}: cannot be read ({type(e).__name__}: {e}); the checkpoint is corrupt, "
                              "use another checkpoint") from None
    return state


def _json_attr(f, name, path):
    value = f.attrs[name]
    return parse_json(value.decode() if isinstance(value, bytes) else value, f"{path}: attribute {name!r}")


def _expect(ok, path, name, what):
    if not ok:
        raise CheckpointError(f"{path}: attribute {name!r} is not what gpuemb writes: {what}; the checkpoint is "
                              "corrupt, use another checkpoint")


def _datasets(group, prefix=""):
    for key, item in group.items():
        if isinstance(item, h5py.Dataset):
            yield prefix + key, item
        else:
            yield from _datasets(item, f"{prefix}{key}/")


def restore_tables(folder, manifest, model):
    """Load the fresh tables of ``model`` from the checkpoint in ``folder``, whatever world size wrote it and
    whatever this one is: one snapshot of whole tables, or every rank's shard files, each rank taking the keys
    and columns its tables hold."""
    sharded = manifest.get("sharded")

    def files(prefix):
        if sharded is None:
            return [os.path.join(folder, EMBEDDINGS)]
        W = sharded["world_size"]
        return [shard_path(os.path.join(folder, prefix), r, W) for r in range(W)]

    try:
        for prefix, collection in collections_of(model, EmbeddingCollection):
            load_sharded_tables({t.config.name: t for t in collection.tables}, files(prefix))
        for prefix, collection in collections_of(model, ShardedEmbeddingCollection):
            load_sharded(collection, files(prefix))
    except (SnapshotError, ValueError) as e:
        raise CheckpointError(f"{e}; use another checkpoint") from None
