"""Where each feature's row sits in the exchange's output, and how that output becomes the collection's.

The exchange writes every feature's row into a place of the same width, ``slot``, the widest table's dim: ``[B·F,
slot]``, so routing, codecs and groups never ask which feature a row belongs to. Where every table has one dim
that is already the collection's output, ``[B, F, D]``. A collection of tables of several dims (``mixed_dims``)
gives each sample's rows side by side, ``[B, width]`` with ``width = Σ dims``, as ``EmbeddingCollection`` does:
one gather of each feature's first ``dims[f]`` columns forward, and one scatter of them into zeros backward. The
padding costs ``B·(F·slot − width)`` floats of memory; rows and gradients travel at their tables' own widths,
except the data-parallel tables' gradients, which are gathered at the slot width.
"""
import numpy as np

from gpuemb.autograd.backend import get_array_module, to_device


class FeatureLayout:
    """``dims`` per feature; ``mixed``: the output is ``[B, width]`` (tables of several dims allowed)."""

    def __init__(self, dims, mixed):
        self.dims, self.mixed = tuple(dims), mixed
        self.slot = max(self.dims)
        self._columns = None  # each output column's place among a sample's F slots, on the device

    def columns(self):
        if self._columns is None:
            self._columns = to_device(np.concatenate([f * self.slot + np.arange(d) for f, d in enumerate(self.dims)]))
        return self._columns

    def outward(self, rows, B):
        """The exchange's ``rows [B·F, slot]`` as the collection's output."""
        F = len(self.dims)
        if not self.mixed:
            return rows.reshape(B, F, self.slot)
        return rows.reshape(B, F * self.slot)[:, self.columns()]

    def inward(self, gy, B):
        """The output's gradient ``gy`` as the exchange's ``[B·F, slot]``, zeros in the padding."""
        F = len(self.dims)
        if not self.mixed:
            return gy.reshape(B * F, self.slot)
        full = get_array_module(gy).zeros((B, F * self.slot), gy.dtype)
        full[:, self.columns()] = gy
        return full.reshape(B * F, self.slot)
