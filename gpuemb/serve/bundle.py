"""Writing an inference bundle from a trained model: ``model.onnx`` (the dense part), ``tables.h5`` (the
weights of every key the tables hold, as fp32, fp16 or int8 rows) and ``manifest.json``.

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

from .errors import BundleError
from .manifest import MANIFEST, ONNX_FILE, TABLES_FILE, write_manifest
from .onnx_graph import OPSET
from .onnx_models import export_onnx
from .rows import check_format, encode


def table_weights(table):
    """``(keys [n] sorted, weights [n, D] float32)`` of every key ``table`` (an ``EmbeddingTable``) holds."""
    chunks = list(table.export())
    weights_cols = table.format.layout["weights"]
    keys = np.concatenate([k for k, _, _ in chunks]) if chunks else np.zeros(0, np.int64)
    rows = np.concatenate([r[:, weights_cols] for _, r, _ in chunks]) if chunks else np.zeros((0, table.dim))
    order = np.argsort(keys, kind="stable")
    weights = rows[order].astype(np.float32)
    if not np.isfinite(weights).all():
        raise ValueError(f"export: table {table.config.name!r} holds rows with NaN or inf; export a checkpoint "
                         "from before the run diverged")
    return keys[order], weights


def _collection(model, attr, name):
    c = getattr(model, attr)
    names = [t.config.name for t in c.tables]
    return {"input": name, "shared": c.shared, "dim": c.dim,
            "feature_tables": names * c.n_features if c.shared else names}


def write_bundle(model, out, rows="fp32"):
    """Write the bundle of ``model`` (a ``gpuemb.models`` model with whole tables) into folder ``out``; returns
    the manifest body."""
    check_format(rows)
    kind = {cls: name for name, cls in MODELS.items()}.get(type(model))
    if kind is None:
        raise ValueError(f"export: {type(model).__name__} is not one of gpuemb.models.MODELS")
    if model.embeddings.dim is None:  # the graph's input is [B, F, D]
        raise ValueError(f"export: the model's tables have several dims {sorted(set(model.embeddings.dims))}, "
                         "which bundles do not hold yet; export a model whose tables share one dim")
    if model.embeddings.hotness is not None:  # the Predictor takes one key per feature
        raise ValueError(f"export: the model pools multi-hot features (hotness {model.embeddings.hotness}), which "
                         "bundles do not hold yet; export a single-hot model")
    out = os.path.abspath(out)
    if os.path.exists(out) and not (os.path.isdir(out) and (not os.listdir(out) or
                                                           os.path.isfile(os.path.join(out, MANIFEST)))):
        raise ValueError(f"export: {out} is not an empty folder or a bundle to replace; give a new folder, so "
                         "that nothing there is overwritten")
    tmp = f"{out}.tmp-{uuid.uuid4().hex[:8]}"
    with _writing(out, ""):
        os.makedirs(tmp)
    try:
        body = _write(model, kind, tmp, rows, out)
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


def _write(model, kind, tmp, rows, out):
    with _writing(out, ONNX_FILE):
        onnx.save(export_onnx(model), os.path.join(tmp, ONNX_FILE))
    collections = {"embeddings": _collection(model, "embeddings", "embeddings")}
    if model.first_order:
        collections["linear_embeddings"] = _collection(model, "linear_embeddings", "first_order")
    tables = {}
    with _writing(out, TABLES_FILE), h5py.File(os.path.join(tmp, TABLES_FILE), "w") as f:
        for attr in collections:
            for t in getattr(model, attr).tables:
                keys, weights = table_weights(t)
                g = f.create_group(f"tables/{t.config.name}")
                g.create_dataset("keys", data=keys)
                for name, data in encode(weights, rows).items():
                    g.create_dataset(name, data=data)
                tables[t.config.name] = {"dim": t.dim, "dtype": t.config.dtype, "n_rows": int(keys.size),
                                         "initializer": dataclasses.asdict(t.config.initializer)}
    body = {"gpuemb_version": gpuemb.__version__, "model": kind, "hyper": model.hyper, "n_dense": model.n_dense,
            "n_features": model.embeddings.n_features, "dim": model.embeddings.dim, "n_tasks": model.n_tasks,
            "rows": rows, "onnx": ONNX_FILE, "opset": OPSET, "tables_file": TABLES_FILE,
            "outputs": ["logits", "probabilities"], "collections": collections, "tables": tables}
    with _writing(out, MANIFEST):
        return write_manifest(tmp, plain(body, "the bundle's manifest"))

