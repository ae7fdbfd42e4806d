"""The trained model of a checkpoint folder (``tools/train.py --checkpoint-dir``), rebuilt for an export.

A checkpoint holds the run's config and the model's weights and rows, not the data's shape; that comes from the
config's data: the synthetic preset's layout, or the shards or raw files it names (which must still be there).
The tables are built on the device placement whatever the run used: where rows lived is not what they are.
"""
import tempfile
from types import SimpleNamespace

from gpuemb.train import checkpoint as ckpt
from gpuemb.train.config import TrainConfig
from gpuemb.train.data import open_data, synthetic_config, uses_synthetic
from gpuemb.train.model import build_model


def data_shape(config):
    """What ``build_model`` reads of the data: n_dense, n_features, n_tasks, sparse and label names."""
    if uses_synthetic(config):
        layout = synthetic_config(config).layout()
        names = layout.dense_names, layout.sparse_names, layout.label_names
    else:
        with tempfile.TemporaryDirectory(prefix="gpuemb-export-") as tmp:
            data = open_data(config, tmp, 1)
            names = data.train.layout.dense_names, data.sparse_names, data.label_names
            data.close()
    dense, sparse, labels = names
    return SimpleNamespace(n_dense=len(dense), n_features=len(sparse), n_tasks=len(labels), sparse_names=sparse,
                           label_names=labels)


def load_model(folder):
    """The model saved in checkpoint ``folder``, in eval mode; CheckpointError or ConfigError say what is wrong."""
    body = ckpt.read_manifest(folder)
    config = TrainConfig.from_dict(body["config"], f"{folder}: its config")
    config = config.replace(store="device", cache_rows=0, host_cache_rows=0, precision="fp32")
    model = build_model(config, data_shape(config), None, config.optimization.embedding_lr)
    state = ckpt.read_state(folder)
    try:
        model.load_state_dict(state["trainer"]["model"])
    except (KeyError, ValueError) as e:
        raise ckpt.CheckpointError(f"{folder}: its weights do not fit the model its config builds ({e})") from None
    ckpt.restore_tables(folder, body, model)
    return model.eval()
