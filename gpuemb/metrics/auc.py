"""Exact ROC AUC by one sort, with ties counted as one half, on the device that holds the scores.

AUC is the chance that a random positive scores above a random negative (Mann-Whitney U over P·N). After
sorting the scores, each group of equal scores contributes ``positives_in_group · (negatives below the group +
negatives_in_group / 2)``; the counts are integer cumulative sums read at the group ends, so the result is exact
up to the final float64 division, whatever the ties. Streaming keeps every (score, label) of the eval set on
the device, 5 bytes a row, and sorts once in ``result``: an exact AUC cannot be binned.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, item

from .common import checked


def _auc(xp, scores, labels):
    order = xp.argsort(scores)  # ties are grouped below, so any sort order will do
    s, pos = scores[order], labels[order].astype(np.int64)
    ends = xp.flatnonzero(xp.concatenate([s[1:] != s[:-1], xp.ones(1, bool)]))  # last index of each tie group
    pos_through = xp.cumsum(pos)[ends]
    neg_through = (ends + 1) - pos_through
    n_pos, n_neg = item(pos_through[-1]), item(neg_through[-1])
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUC: the labels hold {n_pos} positives and {n_neg} negatives; AUC needs both "
                         "(evaluate on more rows)")
    zero = xp.zeros(1, np.int64)
    pos_in = xp.diff(xp.concatenate([zero, pos_through]))
    neg_below = xp.concatenate([zero, neg_through[:-1]])
    neg_in = neg_through - neg_below
    # 2·U in integers: exact for up to ~2**62 / N pairs per group, far past any eval set.
    twice_u = item((pos_in * (2 * neg_below + neg_in)).sum())
    return twice_u / (2.0 * n_pos * n_neg)


def auc(scores, labels):
    """The exact AUC of ``scores`` (logits or probabilities: any monotone map gives the same) against 0/1
    ``labels``, both ``[N]``."""
    return _auc(*checked("auc", scores, labels))


class AUC:
    """Exact AUC over every batch given to ``update`` since the last ``reset``."""

    def __init__(self):
        self.reset()

    def reset(self):
        self._scores, self._labels = [], []

    def update(self, logits, labels):
        _, logits, labels = checked("AUC.update", logits, labels)
        self._scores.append(logits.copy())  # a copy: callers reuse their batch buffers
        self._labels.append(labels)

    @property
    def count(self):
        return sum(int(s.shape[0]) for s in self._scores)

    def result(self):
        if not self._scores:
            raise ValueError("AUC.result: no batch was given to update()")
        xp = get_array_module(self._scores[0])
        return _auc(xp, xp.concatenate(self._scores), xp.concatenate(self._labels))
