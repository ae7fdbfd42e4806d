"""How a bundle stores a table's weights: fp32, fp16, or int8 with a per-row scale and bias.

int8 rows are min/max affine per row: ``codes = round((w - bias) / scale)`` in uint8, with ``bias = min(w)`` and
``scale = (max(w) - min(w)) / 255``, so each row uses all 256 levels of its own range and reads back as
``codes · scale + bias`` within ``scale / 2`` of each weight. A row whose weights are all equal has scale 0 and
reads back exactly. Only the weights are kept: an inference bundle has no use for optimizer state.
"""
import numpy as np

FORMATS = ("fp32", "fp16", "int8")
LEVELS = 255


def check_format(rows):
    """``rows`` if it names a row format; a ValueError saying which to use otherwise."""
    if rows not in FORMATS:
        raise ValueError(f"rows={rows!r} is not a row format; use one of {', '.join(FORMATS)}")
    return rows


def encode(weights, rows):
    """``{dataset: array}`` of ``weights [n, D]`` (float32) stored as ``rows``."""
    w = np.asarray(weights, np.float32)
    if rows == "fp32":
        return {"weights": w}
    if rows == "fp16":
        return {"weights": w.astype(np.float16)}
    low, high = w.min(axis=1), w.max(axis=1)
    scale = ((high - low) / LEVELS).astype(np.float32)
    step = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.clip(np.rint((w - low[:, None]) / step[:, None]), 0, LEVELS).astype(np.uint8)
    return {"codes": codes, "scale": scale, "bias": low.astype(np.float32)}


def decode(parts, rows):
    """The float32 weights ``[n, D]`` of ``parts`` (what ``encode`` returned, or the same slices of it)."""
    if rows == "int8":
        return parts["codes"].astype(np.float32) * parts["scale"][:, None] + parts["bias"][:, None]
    return np.asarray(parts["weights"], np.float32)


def datasets(rows):
    """The datasets a table of ``rows`` format holds, beside its keys."""
    return ("codes", "scale", "bias") if rows == "int8" else ("weights",)
