"""Writing an inference bundle from a trained model: ``model.onnx`` (the dense part), ``tables.h5`` (the
weights of every key the tables hold, as fp32, fp16 or int8 rows, written a chunk at a time: ``bundle_tables.py``)
and ``manifest.json``, which records each sparse feature's name and hotness and each collection's pooling and
tables, so that ``Predictor`` reads and pools a request's bags as the model was trained to.

The bundle is written into a temporary folder beside ``out`` and renamed into place only when whole, so an export
killed or out of disk midway leaves the previous bundle at ``out`` as it was (a server may be reading it), and two
exports to one folder each leave a whole bundle. A folder that holds files but no bundle is refused, not replaced.

This side reads the training model, so it loads the training stack; the runtime that reads a bundle
(``Predictor``) does not.
"""
import dataclasses
import os
import shutil
import uuid
from contextlib import contextmanager

import h5py
import numpy as np
import onnx

import gpuemb
from gpuemb.autograd.plain import plain
from gpuemb.models import MODELS

from gpuemb.store.snapshot import fsync

from .bundle_tables import table_source, write_table
from .errors import BundleError
from .features import JAGGED
from .manifest import MANIFEST, ONNX_FILE, TABLES_FILE, write_manifest
from .onnx_graph import OPSET
from .onnx_models import export_onnx
from .rows import check_format


def _collection(model, attr, name):
    c = getattr(model, attr)
    names = [t.config.name for t in c.tables]
    return {"input": name, "shared": c.shared, "dim": c.dim, "dims": list(c.dims), "pooling": c.mode,
            "feature_tables": names * c.n_features if c.shared else names}


def sparse_features(model, names=None, hotness=None):
    """The manifest's ``features``: ``[{name, hotness}]`` per sparse feature, ``names`` (the data's columns;
    default f0, f1, ...) and ``hotness`` (the keys each row holds, an int, or "jagged" for bags of any length;
    default the model's hotness, or one key each), checked against the model."""
    F, model_hot = model.embeddings.n_features, model.embeddings.hotness
    names = [f"f{i}" for i in range(F)] if names is None else list(names)
    hotness = list(model_hot or (1,) * F) if hotness is None else list(hotness)
    if len(names) != F or len(set(names)) != F or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"export: names {names!r}; give {F} different names, one per sparse feature")
    if len(hotness) != F or not all(h == JAGGED or isinstance(h, (int, np.integer)) and h >= 1 for h in hotness):
        raise ValueError(f"export: hotness {hotness!r}; give one per sparse feature ({F}), each an int >= 1 or "
                         f"{JAGGED!r}")
    for f, h in enumerate(hotness):
        if model_hot is not None and h != JAGGED and h != model_hot[f]:
            raise ValueError(f"export: feature {names[f]!r} has hotness {h}, but the model was built for "
                             f"{model_hot[f]}; give the hotness of the data it was trained on")
    return [{"name": n, "hotness": h if h == JAGGED else int(h)} for n, h in zip(names, hotness)]


def write_bundle(model, out, rows="fp32", names=None, hotness=None, sources=None, origin=None):
    """Write the bundle of ``model`` (a ``gpuemb.models`` model) into folder ``out``; returns the manifest body.

    ``names``, ``hotness``: the sparse features' (``sparse_features``). ``sources``: ``{table name: RowSource}``
    (``bundle_tables.py``) where the tables' rows are read, as a checkpoint's snapshot; default the model's own
    tables, which must then hold them. ``origin``: ``{step, chain}`` of the checkpoint (``checkpoint.origin``),
    where the deltas a Predictor of the bundle applies start."""
    check_format(rows)
    kind = {cls: name for name, cls in MODELS.items()}.get(type(model))
    if kind is None:
        raise ValueError(f"export: {type(model).__name__} is not one of gpuemb.models.MODELS")
    features = sparse_features(model, names, hotness)
    out = os.path.abspath(out)
    if os.path.exists(out) and not (os.path.isdir(out) and (not os.listdir(out) or
                                                           os.path.isfile(os.path.join(out, MANIFEST)))):
        raise ValueError(f"export: {out} is not an empty folder or a bundle to replace; give a new folder, so "
                         "that nothing there is overwritten")
    tmp = f"{out}.tmp-{uuid.uuid4().hex[:8]}"
    with _writing(out, ""):
        os.makedirs(tmp)
    try:
        body = _write(model, kind, tmp, rows, out, features, sources or {}, origin)
        with _writing(out, ""):
            fsync(tmp)
            _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return body


def _replace(tmp, out):
    """Rename the whole bundle ``tmp`` to ``out``, the bundle there before going only once the new one is in."""
    old = f"{out}.old-{uuid.uuid4().hex[:8]}" if os.path.exists(out) else None
    if old:
        os.rename(out, old)
    os.rename(tmp, out)
    fsync(os.path.dirname(out))
    if old:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _writing(out, name):
    """An OSError (a full disk, a read-only folder) while file ``name`` of the bundle at ``out`` is written: one
    BundleError naming it, as the bundle will be named, not the temporary folder it is written in."""
    try:
        yield
    except OSError as e:
        raise BundleError(f"{os.path.join(out, name)}: cannot be written ({e.strerror or e}); free space on that "
                          "disk, or give an --out on another one (a bundle there before is as it was)") from None


def _write(model, kind, tmp, rows, out, features, sources, origin):
    with _writing(out, ONNX_FILE):
        onnx.save(export_onnx(model), os.path.join(tmp, ONNX_FILE))
    collections = {"embeddings": _collection(model, "embeddings", "embeddings")}
    if model.first_order:
        collections["linear_embeddings"] = _collection(model, "linear_embeddings", "first_order")
    tables = {}
    with _writing(out, TABLES_FILE), h5py.File(os.path.join(tmp, TABLES_FILE), "w") as f:
        for attr in collections:
            for t in getattr(model, attr).tables:
                source = sources.get(t.config.name) or table_source(t)
                n = write_table(f.create_group(f"tables/{t.config.name}"), source, rows)
                tables[t.config.name] = {"dim": t.dim, "dtype": t.config.dtype, "n_rows": n,
                                         "initializer": dataclasses.asdict(t.config.initializer)}
    body = {"gpuemb_version": gpuemb.__version__, "model": kind, "hyper": model.hyper, "n_dense": model.n_dense,
            "n_features": model.embeddings.n_features, "features": features, "dim": model.embeddings.dim,
            "n_tasks": model.n_tasks,
            "rows": rows, "onnx": ONNX_FILE, "opset": OPSET, "tables_file": TABLES_FILE,
            "outputs": ["logits", "probabilities"], "collections": collections, "tables": tables,
            **({"origin": origin} if origin else {})}
    with _writing(out, MANIFEST):
        return write_manifest(tmp, plain(body, "the bundle's manifest"))

