"""gpuemb.optim: update rules, dense optimizers, learning-rate schedules and the loss scaler."""
from .adagrad import Adagrad, AdagradRule
from .adam import Adam, AdamRule, AdamW
from .config import Settings
from .ftrl import FtrlRule
from .loss_scaler import LossScaler, LossScaleSettings
from .optimizer import Optimizer
from .rowwise_adagrad import RowwiseAdagradRule
from .rule import UpdateRule
from .schedules import ConstantLR, CosineLR, Schedule, StepLR, WarmupPolyDecayLR, schedule_from_state
from .sgd import SGD, SGDRule

__all__ = [
    "UpdateRule", "SGDRule", "AdagradRule", "AdamRule", "RowwiseAdagradRule", "FtrlRule",
    "Optimizer", "SGD", "Adagrad", "Adam", "AdamW",
    "Schedule", "ConstantLR", "WarmupPolyDecayLR", "CosineLR", "StepLR", "schedule_from_state",
    "LossScaler", "LossScaleSettings", "Settings",
]
