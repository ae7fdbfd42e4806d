"""The argument checks every metric shares, so a bad batch fails at ``update`` and names what was wrong."""
from gpuemb.autograd.backend import get_array_module, item


def checked(owner, logits, labels):
    """``(xp, logits, labels)``: flat float logits and boolean labels on the logits' device, or a ValueError."""
    xp = get_array_module(logits)
    logits, labels = xp.asarray(logits), xp.asarray(labels)
    if logits.ndim != 1 or labels.shape != logits.shape:
        raise ValueError(f"{owner}: want logits and labels of one shape [N], got {logits.shape} and "
                         f"{labels.shape}; for T tasks keep one metric per task column")
    if logits.dtype.kind != "f" or labels.dtype.kind not in "fiub":
        raise ValueError(f"{owner}: want float logits and 0/1 labels, got {logits.dtype} and {labels.dtype}")
    bad = ~xp.isfinite(logits)
    if item(bad.any()):  # one read of the device per check, and only a failing batch reads more
        raise ValueError(f"{owner}: {item(bad.sum())} of {logits.size} logits are NaN or infinite; the model "
                         "diverged (lower the learning rate) or the batch is corrupt")
    odd = (labels != 0) & (labels != 1)
    if item(odd.any()):
        raise ValueError(f"{owner}: labels must be 0 or 1; {item(odd.sum())} are not, such as "
                         f"{item(labels[odd][0])}")
    return xp, logits, labels.astype(bool)
