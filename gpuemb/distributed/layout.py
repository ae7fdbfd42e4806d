"""Moving columns between rows of differently split tables: what joins and splits column shards.

A stored row is ``[weights | state parts ...]`` (a snapshot's ``layout``: ``{part: [start, stop]}``). Some parts
have one group of columns per weight column (the weights, Adagrad's and Adam's per-coordinate state), others one
per row (row-wise Adagrad's accumulator). A part's columns per weight column (``k``, e.g. 2 where a float16
table stores a float32 state column as two halves) follow from its width. A shard of weight columns
``[a, b)`` holds ``k·(b - a)`` columns of each per-column part and the whole of each per-row part.
"""
import numpy as np

from gpuemb.optim import row_layout


def per_column(rule):
    """The names of the parts of ``rule``'s rows whose width grows with the weight columns."""
    one, two = row_layout(rule, 1), row_layout(rule, 2)
    return {name for name in one if (two[name].stop - two[name].start) != (one[name].stop - one[name].start)}


def resized(layout, cols, new_cols, rule):
    """``layout`` (``{part: [start, stop]}`` of a shard of ``cols`` weight columns) for ``new_cols`` columns."""
    grows, out, at = per_column(rule), {}, 0
    for name, (start, stop) in layout.items():
        width = (stop - start) // cols * new_cols if name in grows else stop - start
        out[name], at = [at, at + width], at + width
    return out


def copy_columns(src, src_layout, src_cols, dst, dst_layout, dst_cols, rule):
    """Copy into rows ``dst`` (a shard of weight columns ``dst_cols = (a, b)`` of the whole row) the columns they
    share with rows ``src`` (a shard of ``src_cols``), part by part. A per-row part is copied whole from the shard
    that holds ``dst``'s first column (every shard keeps the same value up to rounding, see ``column.py``). Both
    are ``[n, width]``, row i the same key."""
    grows = per_column(rule)
    lo, hi = max(src_cols[0], dst_cols[0]), min(src_cols[1], dst_cols[1])
    if lo >= hi:
        return dst
    for name, (s0, s1) in src_layout.items():
        d0, d1 = dst_layout[name]
        if name not in grows:
            if src_cols[0] <= dst_cols[0]:  # the shard holding dst's first column gives the per-row state
                dst[:, d0:d1] = src[:, s0:s1]
            continue
        k = (s1 - s0) // (src_cols[1] - src_cols[0])
        dst[:, d0 + k * (lo - dst_cols[0]):d0 + k * (hi - dst_cols[0])] = \
            src[:, s0 + k * (lo - src_cols[0]):s0 + k * (hi - src_cols[0])]
    return dst


def shard_rows(rows, layout, dim, cols, rule):
    """The rows of the column shard ``cols`` cut from whole rows ``[n, width]`` of a ``dim``-wide table."""
    out_layout = resized(layout, dim, cols[1] - cols[0], rule)
    out = np.zeros((rows.shape[0], list(out_layout.values())[-1][1]), rows.dtype)
    return copy_columns(rows, layout, (0, dim), out, out_layout, cols, rule)
