"""Evaluation metrics of binary click models: exact AUC, log-loss and accuracy, each streaming over an eval set.

Every metric takes logits (not probabilities) and 0/1 labels, on whatever device holds them, and reduces there:
only the final number crosses to the host. ``update`` over the eval batches, then ``result``; the functions
``auc``/``log_loss``/``accuracy`` are the one-batch shortcuts. A model with T tasks keeps one metric per task.
"""
from .auc import AUC, auc
from .pointwise import Accuracy, LogLoss, accuracy, log_loss

__all__ = ["AUC", "Accuracy", "LogLoss", "accuracy", "auc", "log_loss"]
