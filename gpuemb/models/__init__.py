"""gpuemb.models: the recommendation models, each a ``RecModel`` built by name with :func:`build`.

Every model maps ``(dense [B, n_dense], sparse [B, F])`` to logits ``[B]`` (``[B, T]`` for MMoE), through
``embed(sparse)`` and ``head(dense, *embedded)``; docs/models.md lists them with their hyperparameters.
"""
from .base import RecModel
from .dcn import DCNv2
from .deepfm import DeepFM
from .dlrm import DLRM
from .mmoe import MMoE
from .pnn import PNN
from .wide_deep import WideDeep
from .xdeepfm import XDeepFM

MODELS = {"dlrm": DLRM, "dcn": DCNv2, "deepfm": DeepFM, "xdeepfm": XDeepFM, "pnn": PNN, "wide_deep": WideDeep,
          "mmoe": MMoE}


def build(name, n_dense, tables, seed=0, **hyper):
    """The model ``name`` (a key of ``MODELS``) over ``n_dense`` dense features and the sparse ``tables``.

    tables: a list of ``TableConfig``, one per sparse feature, or one ``TableConfig`` with ``n_features=F``.
    hyper: the model's hyperparameters (see its docstring); an unknown one raises TypeError naming the valid ones.
    """
    if name not in MODELS:
        raise ValueError(f"build: unknown model {name!r}; use one of {', '.join(MODELS)}")
    return MODELS[name](n_dense, tables, seed, **hyper)


__all__ = ["MODELS", "build", "RecModel", "DLRM", "DCNv2", "DeepFM", "XDeepFM", "PNN", "WideDeep", "MMoE"]
