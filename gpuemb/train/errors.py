"""The errors a training run reports to its user: each says what was wrong, where, and what to do instead.

``exit_code`` is what ``tools/train.py`` exits with: 2 for a setting that cannot work (found before any
training step), 1 for a run that started and failed.
"""


class TrainError(Exception):
    """Base of the errors of ``gpuemb.train``."""

    exit_code = 1


class ConfigError(TrainError, ValueError):
    """A setting is unknown, out of range, or impossible together with another; the message names the key."""

    exit_code = 2


class ResumeError(TrainError):
    """A checkpoint was saved by a run with other settings (the message names the field), or is not there."""

    exit_code = 2


class CheckpointError(TrainError):
    """A checkpoint is incomplete or corrupt; the message names the file. Nothing of it was loaded."""


class DivergedError(TrainError):
    """The loss became NaN or infinite; the message names the step and what to try."""
