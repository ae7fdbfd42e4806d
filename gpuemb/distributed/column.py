"""One column shard of a column-wise table: the weight columns ``[start, stop)`` of every key, and their state.

Two things make a set of column shards train exactly like the whole table:

- A new key's weights are the columns ``[start, stop)`` of the whole row's initial weights. The initializer draws
  element (key, d) from the column index d and scales by ``1/sqrt(dim)`` of the whole dim, so a shard draws the
  whole row and keeps its columns.
- Row-wise Adagrad keeps one accumulator per row and adds the mean of the row's squared gradient over *all*
  ``dim`` columns, which no shard sees alone. The rules of the other optimizers act per column, so their shards
  need nothing more. A coupled shard (row-wise Adagrad, fewer than all columns) therefore holds its update back:
  ``apply_update`` keeps the batch's summed gradients and reports the per-key sum of its columns' squared (decayed)
  gradients (``pending_sums``); the collection adds these sums up over the table's shards with one all-to-all,
  and ``finish(total)`` sets each accumulator to grow by ``total / dim`` before the fused rule runs. Every shard
  sees the same keys in the same order (each requester sends each shard the same list), so their sums line up
  key by key, and every shard ends with the whole row's accumulator, up to rounding: each shard's last float32
  addition is its own, an ulp or so apart a step.
"""
import dataclasses

import numpy as np

from gpuemb.autograd.backend import get_array_module, to_host
from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store.init import initial_weights
from gpuemb.store.table import EmbeddingTable


def couples_columns(rule, cols, dim):
    """Whether a shard of ``cols`` of a ``dim``-wide table under ``rule`` needs the other shards' gradients."""
    return type(rule) is RowwiseAdagradRule and tuple(cols) != (0, dim)


def coupled_groups(placement, config):
    """The sets of ranks whose column shards of ``config``'s table add up their squared-gradient sums: the shards
    of one residue, which get the same keys in the same order (column-wise: all of them; a grid: one set per
    residue, a shard of each column range)."""
    if not any(couples_columns(config.rule, s.cols, config.dim) for s in placement.shards):
        return []
    groups = {}
    for s in placement.shards:
        groups.setdefault(s.residue, set()).add(s.rank)
    return list(groups.values())


class ColumnShardTable(EmbeddingTable):
    """The columns ``cols = (start, stop)`` of the table ``config`` (whose dim is the whole row's)."""

    def __init__(self, config, cols):
        start, stop = cols
        if not 0 <= start < stop <= config.dim:
            raise ValueError(f"ColumnShardTable({config.name!r}): cols={cols} must lie within [0, {config.dim})")
        self.full_dim, self.cols = config.dim, (start, stop)
        self.coupled = couples_columns(config.rule, cols, config.dim)
        self._pending = None
        super().__init__(dataclasses.replace(config, dim=stop - start))
        self.format.first = start  # stochastic rounding draws by the whole row's column, as the whole table does

    def initial(self, keys):
        """The columns ``cols`` of the whole row's initial weights (the state does not depend on them for any rule)."""
        w = initial_weights(self.config.initializer, keys, self.full_dim, self.config.dtype)
        return w[:, self.cols[0]:self.cols[1]]

    def hold_updates(self):
        if self.coupled:
            raise ValueError(f"{self.config.name}: a column shard under row-wise Adagrad cannot hold its updates "
                             "for a loss scaler: its accumulator needs the other shards' sums of the unscaled "
                             "gradients during the backward. Train it in fp32, or shard the table row- or table-wise")
        return super().hold_updates()

    def apply_update(self, batch, positions, grads, adjust=None):
        if not self.coupled:
            return super().apply_update(batch, positions, grads, adjust)
        positions = to_host(positions)
        w = to_host(self.working_rows(batch, positions)[:, :self.dim]).astype(np.float64)
        g = to_host(grads).astype(np.float64) + self.rule.weight_decay * w  # what the kernel squares
        self._pending = (batch, positions, grads, (g * g).sum(axis=1))

    def pending_sums(self):
        """The per-key sums of squared gradients over this shard's columns, float64 ``[U]`` in the order of the
        batch's unique keys (empty when the shard got no keys this step)."""
        return np.zeros(0) if self._pending is None else self._pending[3]

    def finish(self, total):
        """Apply the held-back update with ``total [U]``, the sums over all of the row's columns."""
        if self._pending is None:
            return
        batch, positions, grads, local = self._pending
        self._pending = None
        acc = self.format.working_layout["sum"].start
        # The fused kernel adds this shard's own mean (local / dim); shift the accumulator so that it ends
        # up grown by the whole row's mean (total / full_dim) instead.
        shift = total / self.full_dim - local / self.dim

        def adjust(rows):
            rows[:, acc] += get_array_module(rows).asarray(shift, dtype=rows.dtype)
        super().apply_update(batch, positions, grads, adjust)
