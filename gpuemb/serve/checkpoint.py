"""The trained model of a checkpoint folder (``tools/train.py --checkpoint-dir``), rebuilt for an export.

A checkpoint holds the run's config, the model's weights and rows, and the data's shape (``data_shape`` in its
manifest: the dense count, the sparse and label names). A checkpoint written before the manifest had it takes
the shape from the config's data: the synthetic preset's layout, or the shards or raw files it names (which must
then still be there).
The tables are built on the device placement whatever the run used: where rows lived is not what they are.
"""
import tempfile
from types import SimpleNamespace

from gpuemb.train import checkpoint as ckpt
from gpuemb.train.config import TrainConfig
from gpuemb.train.data import open_data, synthetic_config, uses_synthetic
from gpuemb.train.model import build_model


def data_shape(config, body=None):
    """What ``build_model`` reads of the data: n_dense, n_features, n_tasks, sparse and label names; from the
    manifest ``body`` where it records them."""
    recorded = (body or {}).get("data_shape")
    if recorded is not None:
        return _shape(*_checked(recorded))
    if uses_synthetic(config):
        layout = synthetic_config(config).layout()
        return _shape(len(layout.dense_names), layout.sparse_names, layout.label_names)
    with tempfile.TemporaryDirectory(prefix="gpuemb-export-") as tmp:
        data = open_data(config, tmp, 1)
        names = data.train.layout.dense_names, data.sparse_names, data.label_names
        data.close()
    return _shape(len(names[0]), names[1], names[2])


def _checked(recorded):
    """``(n_dense, sparse_names, label_names)`` of a manifest's ``data_shape``, or a CheckpointError."""
    try:
        n_dense, sparse, labels = recorded["n_dense"], recorded["sparse_names"], recorded["label_names"]
        ok = type(n_dense) is int and n_dense >= 0 and all(
            isinstance(v, list) and v and all(isinstance(n, str) for n in v) for v in (sparse, labels))
    except (TypeError, KeyError):
        ok = False
    if not ok:
        raise ckpt.CheckpointError(f"the manifest's data_shape {recorded!r} is not n_dense (an int >= 0) with "
                                   "non-empty lists of sparse_names and label_names; the file was changed by hand "
                                   "or is damaged")
    return n_dense, sparse, labels


def _shape(n_dense, sparse, labels):
    return SimpleNamespace(n_dense=n_dense, n_features=len(sparse), n_tasks=len(labels), sparse_names=tuple(sparse),
                           label_names=tuple(labels))


def load_model(folder):
    """The model saved in checkpoint ``folder``, in eval mode; CheckpointError or ConfigError say what is wrong."""
    body = ckpt.read_manifest(folder)
    config = TrainConfig.from_dict(body["config"], f"{folder}: its config")
    config = config.replace(store="device", cache_rows=0, host_cache_rows=0, precision="fp32")
    model = build_model(config, data_shape(config, body), None, config.optimization.embedding_lr)
    state = ckpt.read_state(folder)
    try:
        model.load_state_dict(state["trainer"]["model"])
    except (KeyError, ValueError) as e:
        raise ckpt.CheckpointError(f"{folder}: its weights do not fit the model its config builds ({e})") from None
    ckpt.restore_tables(folder, body, model)
    return model.eval()
