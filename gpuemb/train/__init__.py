"""gpuemb.train: training runs from a config: data, model, the loop, evaluation, metrics and checkpoints.

``train(TrainConfig.of(...))`` runs one; ``tools/train.py`` is its command line (``gpuemb.train.cli``).
"""
from .config import TrainConfig
from .errors import CheckpointError, ConfigError, DivergedError, ResumeError, TrainError
from .run import Reporter, Run, train

__all__ = ["TrainConfig", "train", "Run", "Reporter", "TrainError", "ConfigError", "ResumeError",
           "CheckpointError", "DivergedError"]
