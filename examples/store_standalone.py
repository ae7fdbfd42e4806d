"""The embedding store on its own, under a model that lives elsewhere (docs/store.md, "The store on its own").

The other stack computes the loss and hands back the gradient of the loss with respect to the rows; the store
does the rest, the row update included. Three calls:

    rows = embeddings(sparse)   # [B, F, D]: a gpuemb Tensor; rows.data is a NumPy or CuPy array (DLPack)
    rows.backward(grad_rows)    # the rows' gradient from the other stack: the tables update their rows
    release(rows)               # only for a forward whose backward will never come: unpins its rows

and ``embeddings.eval()`` for evaluation (no key inserted, nothing pinned, nothing recorded).

Here the "other stack" is a logistic regression in plain NumPy over the summed rows. The example checks the
store's rows against a NumPy row-wise Adagrad of its own, key by key, and exits non-zero if they differ.
Run: ``python examples/store_standalone.py``.
"""
import sys

import numpy as np

from gpuemb.autograd.backend import to_host
from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store import EmbeddingCollection, TableConfig, release
from gpuemb.store.init import initial_weights

F, D, B, STEPS, LR, EPS = 3, 8, 256, 200, 0.1, 1e-10


def numpy_rowwise_adagrad(rows, acc, keys, grads):
    """The reference, in float32 as the store computes: per unique key, the batch's gradients summed, then
    ``acc += mean(g²)``, ``w -= lr·g / (sqrt(acc) + eps)``."""
    for k in np.unique(keys):
        g = grads[keys == k].sum(0)
        acc[k] = acc.get(k, np.float32(0)) + (g * g).mean(dtype=np.float32)
        rows[k] = rows[k] - np.float32(LR) * g / (np.sqrt(acc[k]) + np.float32(EPS))


def main():
    rng = np.random.default_rng(0)
    configs = [TableConfig(f"f{i}", D, rule=RowwiseAdagradRule(eps=EPS), lr=LR) for i in range(F)]
    embeddings = EmbeddingCollection(configs)
    teacher = rng.standard_normal((F, 1000))  # the hidden truth: one weight per key
    w = np.zeros(D)  # the other stack's own parameter
    ref_rows = [{} for _ in range(F)]
    ref_acc = [{} for _ in range(F)]
    losses = []
    for _ in range(STEPS):
        sparse = rng.integers(0, 1000, (B, F))
        label = rng.random(B) < 1 / (1 + np.exp(-teacher[np.arange(F), sparse].sum(1)))

        rows = embeddings(sparse)  # [B, F, D]
        x = to_host(rows.data).astype(np.float64).sum(1)  # the other stack's forward
        p = 1 / (1 + np.exp(-x @ w))
        losses.append(-np.mean(np.log(np.where(label, p, 1 - p) + 1e-12)))
        dlogit = (p - label) / B
        grad_rows = np.repeat((dlogit[:, None] * w)[:, None, :], F, axis=1).astype(np.float32)  # [B, F, D]
        w -= 0.5 * (x.T @ dlogit)

        for f in range(F):  # the reference, before the store updates
            for k in np.unique(sparse[:, f]):
                if k not in ref_rows[f]:
                    ref_rows[f][k] = initial_weights(configs[f].initializer, np.array([k]), D)[0]
            numpy_rowwise_adagrad(ref_rows[f], ref_acc[f], sparse[:, f], grad_rows[:, f])
        rows.backward(grad_rows)  # the store updates its rows

    probe = embeddings(rng.integers(0, 1000, (4, F)))
    released = release(probe)  # looked at, never trained on: give its rows back (one lookup per physical store)
    worst = 0.0
    for f, table in enumerate(embeddings.tables):
        for keys, stored, _ in table.export():
            want = np.stack([ref_rows[f][k] for k in keys])
            worst = max(worst, float(np.abs(stored[:, :D] - want).max()))
    embeddings.eval()
    held_out = embeddings(rng.integers(0, 1000, (B, F)))
    print(f"loss {losses[0]:.4f} -> {np.mean(losses[-20:]):.4f}; rows against a NumPy row-wise Adagrad: max "
          f"|diff| {worst:.2e}; released {released} lookups; eval output recorded: {held_out.requires_grad}")
    if (worst > 1e-5 or not np.mean(losses[-20:]) < losses[0] or released != len(embeddings.stores)
            or held_out.requires_grad):
        print("store_standalone: FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
