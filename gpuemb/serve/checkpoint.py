"""The trained model of a checkpoint folder (``tools/train.py --checkpoint-dir``), rebuilt for an export.

A checkpoint holds the run's config, the model's weights and rows, and the data's shape (``data_shape`` in its
manifest: the dense count, the sparse and label names, each sparse feature's hotness, 0 for jagged). A checkpoint
written before the manifest had it (or before it had the hotness) takes the shape from the config's data: the
synthetic preset's layout, or the shards or raw files it names (which must then still be there).
The tables are built on the device placement whatever the run used: where rows lived is not what they are.
``load_export`` leaves them empty where the checkpoint is one snapshot file, and hands its tables to the export to
read a chunk at a time.
"""
import os
import tempfile
from types import SimpleNamespace

from gpuemb.train import checkpoint as ckpt
from gpuemb.train.config import TrainConfig, as_it_ran
from gpuemb.train.data import open_data, synthetic_config, uses_synthetic
from gpuemb.store.snapshot import SnapshotError, read_snapshot
from gpuemb.train.model import build_model

from .bundle_tables import snapshot_source
from .features import JAGGED


def data_shape(config, body=None):
    """What ``build_model`` reads of the data: n_dense, n_features, n_tasks, sparse and label names; from the
    manifest ``body`` where it records them."""
    recorded = (body or {}).get("data_shape")
    if recorded is not None:
        checked = _checked(recorded)
        if checked[3] is not None:  # else a checkpoint from before the hotness was recorded: the data's, below
            return _shape(*checked)
    if uses_synthetic(config):
        layout = synthetic_config(config).layout()
        return _shape(len(layout.dense_names), layout.sparse_names, layout.label_names, layout.hotness)
    with tempfile.TemporaryDirectory(prefix="gpuemb-export-") as tmp:
        data = open_data(config, tmp, 1)
        names = data.train.layout.dense_names, data.sparse_names, data.label_names, data.train.layout.hotness
        data.close()
    return _shape(len(names[0]), *names[1:])


def _checked(recorded):
    """``(n_dense, sparse_names, label_names)`` of a manifest's ``data_shape``, or a CheckpointError."""
    try:
        n_dense, sparse, labels = recorded["n_dense"], recorded["sparse_names"], recorded["label_names"]
        hot = recorded.get("sparse_hotness")
        ok = type(n_dense) is int and n_dense >= 0 and all(
            isinstance(v, list) and v and all(isinstance(n, str) for n in v) for v in (sparse, labels)) and \
            (hot is None or isinstance(hot, list) and (not hot or len(hot) == len(sparse) and all(
                type(h) is int and h >= 0 for h in hot)))
    except (TypeError, KeyError):
        ok = False
    if not ok:
        raise ckpt.CheckpointError(f"the manifest's data_shape {recorded!r} is not n_dense (an int >= 0) with "
                                   "non-empty lists of sparse_names and label_names, and sparse_hotness (an int "
                                   ">= 0 per sparse name); the file was changed by hand or is damaged")
    return n_dense, sparse, labels, hot


def _shape(n_dense, sparse, labels, hot=()):
    """What ``build_model`` reads; ``hot``: each feature's keys per row, 0 for jagged (empty: one each)."""
    hot = tuple(hot) or (1,) * len(sparse)
    return SimpleNamespace(n_dense=n_dense, n_features=len(sparse), n_tasks=len(labels), sparse_names=tuple(sparse),
                           label_names=tuple(labels), sparse_hotness=tuple(h or JAGGED for h in hot),
                           # as the run's DataSet: a fixed multi-hot matrix, else None (jagged bags come pooled)
                           hotness=hot if max(hot) > 1 and 0 not in hot else None)


def load_model(folder):
    """The model saved in checkpoint ``folder``, in eval mode; CheckpointError or ConfigError say what is wrong."""
    return _load(folder, ckpt.read_manifest(folder), True)[0]


def load_export(folder):
    """What ``write_bundle`` takes of checkpoint ``folder``: ``{model, names, hotness, sources, origin}``. Where the
    checkpoint is one snapshot file its tables stay empty and ``sources`` reads their rows from it a chunk at a
    time; a sharded one's rows are loaded into the model (``sources`` None)."""
    body = ckpt.read_manifest(folder)
    sharded = body.get("sharded") is not None
    model, data = _load(folder, body, sharded)
    sources = None
    if not sharded:
        try:
            snapshot = read_snapshot(os.path.join(folder, ckpt.EMBEDDINGS))
        except SnapshotError as e:
            raise ckpt.CheckpointError(f"{e}; use another checkpoint") from None
        sources = {}
        for t in _tables(model):
            if t.config.name not in snapshot.tables:
                raise ckpt.CheckpointError(f"{folder}: its snapshot has no table {t.config.name!r}, which its "
                                           "config builds; use another checkpoint")
            sources[t.config.name] = snapshot_source(snapshot.tables[t.config.name], t.dim)
    return {"model": model, "names": data.sparse_names, "hotness": data.sparse_hotness, "sources": sources,
            "origin": origin(folder, body)}


def origin(folder, body):
    """Where in a training run the checkpoint is: its step, and the chain of deltas its run wrote (None where it
    wrote none), so a bundle of it follows on from there without being told."""
    deltas = ckpt.read_state(folder)["loop"].get("deltas") or {}
    return {"step": body["step"], "chain": deltas.get("chain")}


def _tables(model):
    return [t for c in (model.embeddings, getattr(model, "linear_embeddings", None)) if c for t in c.tables]


def _load(folder, body, restore):
    """``(model in eval mode, data shape)`` of checkpoint ``folder`` (manifest ``body``); ``restore``: load the
    tables' rows too."""
    config = TrainConfig.from_dict(as_it_ran(body["config"]), f"{folder}: its config")
    config = config.replace(store="device", cache_rows=0, host_cache_rows=0, precision="fp32")
    shape = data_shape(config, body)
    model = build_model(config, shape, None, config.optimization.embedding_lr)
    state = ckpt.read_state(folder)
    try:
        model.load_state_dict(state["trainer"]["model"])
    except (KeyError, ValueError) as e:
        raise ckpt.CheckpointError(f"{folder}: its weights do not fit the model its config builds ({e})") from None
    if restore:
        ckpt.restore_tables(folder, body, model)
    return model.eval(), shape
