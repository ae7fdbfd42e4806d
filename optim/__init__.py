"""gpuemb.optim: update rules, dense optimizers, the fused row update of embedding tables, learning-rate schedules
and the loss scaler."""
from .adagrad import Adagrad, AdagradRule
from .adam import Adam, AdamRule, AdamW
from .settings import Settings
from .ftrl import FtrlRule
from .loss_scaler import LossScaler, LossScaleSettings
from .optimizer import OPTIMIZERS, Optimizer
from .rowwise import apply_rows, apply_rows_ref, init_rows, row_layout, row_width, update_rows
from .rowwise_adagrad import RowwiseAdagradRule
from .rule import RULES, UpdateRule, rule_class
from .schedules import SCHEDULES, ConstantLR, CosineLR, Schedule, StepLR, WarmupPolyDecayLR, schedule_from_state
from .sgd import SGD, SGDRule

__all__ = [
    "UpdateRule", "SGDRule", "AdagradRule", "AdamRule", "RowwiseAdagradRule", "FtrlRule",
    "row_layout", "row_width", "init_rows", "apply_rows", "apply_rows_ref", "update_rows", "RULES", "OPTIMIZERS",
    "SCHEDULES", "rule_class",
    "Optimizer", "SGD", "Adagrad", "Adam", "AdamW",
    "Schedule", "ConstantLR", "WarmupPolyDecayLR", "CosineLR", "StepLR", "schedule_from_state",
    "LossScaler", "LossScaleSettings", "Settings",
]
