"""Log-loss and accuracy: per-row terms summed on the device in float64, so streaming equals one big batch."""
import numpy as np

from gpuemb.autograd.backend import item

from .common import checked


def _log_loss_terms(xp, logits, labels):
    """``-log p(label)`` from logits without overflow: softplus(z) - y·z = max(z, 0) - y·z + log1p(exp(-|z|))."""
    z = logits.astype(np.float64)
    return xp.maximum(z, 0) - labels * z + xp.log1p(xp.exp(-xp.abs(z)))


def _correct(xp, logits, labels):
    return (logits > 0) == labels  # p > 0.5 exactly when the logit is > 0


class _Mean:
    """The mean of a per-row term over every batch since ``reset``; the sum stays on the device until ``result``."""
    name = None
    term = None

    def __init__(self):
        self.reset()

    def reset(self):
        self._sum, self.count = 0.0, 0

    def update(self, logits, labels):
        xp, logits, labels = checked(f"{self.name}.update", logits, labels)
        self._sum = self._sum + type(self).term(xp, logits, labels).sum(dtype=np.float64)
        self.count += int(logits.shape[0])

    def result(self):
        if not self.count:
            raise ValueError(f"{self.name}.result: no batch was given to update()")
        return float(item(self._sum)) / self.count


class LogLoss(_Mean):
    """Mean binary cross-entropy of the logits, in nats."""
    name, term = "LogLoss", staticmethod(_log_loss_terms)


class Accuracy(_Mean):
    """The share of rows where ``logit > 0`` agrees with the label."""
    name, term = "Accuracy", staticmethod(_correct)


def log_loss(logits, labels):
    """Mean binary cross-entropy of ``logits`` against 0/1 ``labels``, both ``[N]``."""
    m = LogLoss()
    m.update(logits, labels)
    return m.result()


def accuracy(logits, labels):
    """The share of ``[N]`` rows where ``logits > 0`` matches the 0/1 ``labels``."""
    m = Accuracy()
    m.update(logits, labels)
    return m.result()
