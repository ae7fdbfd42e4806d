"""JAX runs the dense tower and the loss; gpuemb runs the lookups and the fused row updates (docs/store.md, "The
store on its own").

Per step: the rows ``[B, F, D]`` go from gpuemb to JAX by DLPack (no copy: the store's CPU outputs are 64-byte
aligned, as XLA wants), JAX computes the loss and its gradients with respect to its own parameters and to the
rows, and the rows' gradient goes back to gpuemb, whose tables update their rows (row-wise Adagrad here). The
held-out evaluation is ``embeddings.eval()``, one switch.

Run: ``python examples/jax_client.py [--tables per-feature|shared] [--steps N]`` (needs ``pip install jax``).
It exits non-zero if any step's rows were copied on the way to JAX or the model did not learn.
"""
import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store import EmbeddingCollection, TableConfig

F, D, DENSE, B, HIDDEN = 4, 16, 3, 512, 32


def tower(params, dense, rows):
    """The dense part, in JAX: an MLP over the dense features and the flattened rows, one logit per sample."""
    x = jnp.concatenate([dense, rows.reshape(rows.shape[0], -1)], axis=1)
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return (h @ params["w2"] + params["b2"])[:, 0]


def loss_fn(params, dense, rows, label):
    logit = tower(params, dense, rows)
    return jnp.mean(jnp.logaddexp(0.0, logit) - label * logit)  # binary cross-entropy on the logits


def data(rng, teacher, n):
    """Criteo-like rows: Zipf keys per feature, labels drawn from a hidden per-key teacher."""
    sparse = np.minimum(rng.zipf(1.2, (n, F)), 5000) - 1
    dense = rng.standard_normal((n, DENSE)).astype(np.float32)
    logit = teacher[np.arange(F), sparse].sum(1) + dense[:, 0]
    return dense, sparse, (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)


def auc(score, label):
    order = np.argsort(score)
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    pos = label > 0.5
    return (ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())


def main(argv=None):
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--tables", choices=("per-feature", "shared"), default="per-feature")
    args.add_argument("--steps", type=int, default=300)
    args = args.parse_args(argv)
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((F, 5000))
    rule = RowwiseAdagradRule()
    if args.tables == "shared":
        embeddings = EmbeddingCollection(TableConfig("shared", D, rule=rule, lr=0.1), n_features=F)
    else:
        embeddings = EmbeddingCollection([TableConfig(f"f{i}", D, rule=rule, lr=0.1) for i in range(F)])
    key = jax.random.PRNGKey(0)
    params = {"w1": jax.random.normal(key, (DENSE + F * D, HIDDEN)) * 0.1, "b1": jnp.zeros(HIDDEN),
              "w2": jax.random.normal(jax.random.fold_in(key, 1), (HIDDEN, 1)) * 0.1, "b2": jnp.zeros(1)}
    step = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 2)))

    copies, losses = 0, []
    for _ in range(args.steps):
        dense, sparse, label = data(rng, teacher, B)
        rows = embeddings(sparse)  # a gpuemb Tensor
        rows_jax = jnp.from_dlpack(rows.data)  # no copy where the buffer is aligned
        copies += rows_jax.unsafe_buffer_pointer() != rows.data.ctypes.data
        loss, (g_params, g_rows) = step(params, dense, rows_jax, label)
        params = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, g_params)
        rows.backward(np.asarray(g_rows))  # the tables update their rows
        losses.append(float(loss))

    embeddings.eval()  # one switch: no key inserted, nothing pinned, no tape
    dense, sparse, label = data(rng, teacher, 20000)
    held_out = auc(np.asarray(tower(params, dense, jnp.from_dlpack(embeddings(sparse).data))), label)
    rows_now = sum(len(t) for t in embeddings.tables)
    print(f"jax_client ({args.tables} tables): {args.steps} steps, loss {np.mean(losses[:20]):.4f} -> "
          f"{np.mean(losses[-20:]):.4f}, held-out AUC {held_out:.4f}, {rows_now} rows, rows copied on the way to "
          f"JAX in {copies} of {args.steps} steps")
    if copies or held_out < 0.65 or not np.mean(losses[-20:]) < np.mean(losses[:20]):
        print("jax_client: FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
