"""ONNX emitters of the layers the models are built from: each reads a layer's own parameters and writes the
nodes of its eval forward (dropout is the identity there), returning its output's name.

``g`` is a ``GraphBuilder``; ``x`` names are values of the graph, shapes as in the layers' docstrings.
"""
import numpy as np

from gpuemb.autograd.backend import to_host


def array(t):
    """A parameter Tensor as a float32 NumPy array."""
    return np.asarray(to_host(t.data), np.float32)


def linear(g, x, layer, in_columns=None):
    """``Linear``: ``x @ W.T + b`` as one Gemm; ``in_columns`` keeps the first columns of W only (the inputs past
    them are zero padding)."""
    w = array(layer.weight)
    w = w if in_columns is None else w[:, :in_columns]
    return g.op("Gemm", x, g.const(w, "weight"), g.const(array(layer.bias), "bias"), transB=1)


def mlp(g, x, m, in_columns=None):
    """``MLP``: Gemm + Relu per hidden layer, then the last layer's activation (none, relu or sigmoid)."""
    for i, layer in enumerate(m.layers):
        x = linear(g, x, layer, in_columns if i == 0 else None)
        last = i == len(m.layers) - 1
        if not last or m.last_activation == "relu":
            x = g.op("Relu", x)
    return g.op("Sigmoid", x) if m.last_activation == "sigmoid" else x


def flat_with_dense(g, emb, dense, width):
    """``[B, width + n_dense]``: the embeddings flattened to ``width`` (F·D, or the sum of mixed dims), then the
    dense features (``dense`` None: none)."""
    flat = g.reshape(emb, [-1, width])
    return flat if dense is None else g.op("Concat", flat, dense, axis=1)


def dense_field(g, field, dense, emb, F, D):
    """``DenseField``: the fields ``[B, F (+1), D]``, the dense features projected to one more field."""
    if field.proj is None:
        return emb
    return g.op("Concat", emb, g.reshape(linear(g, dense, field.proj), [-1, 1, D]), axis=1)


def pairs(g, z, n, diagonal=False):
    """``[B, P]``: the dot products of rows i > j (i >= j with ``diagonal``) of ``z [B, n, D]``, in the dot
    interaction's row-major order."""
    zz = g.op("MatMul", z, g.op("Transpose", z, perm=[0, 2, 1]))
    li, lj = np.tril_indices(n, 0 if diagonal else -1)
    return g.op("Gather", g.reshape(zz, [-1, n * n]), g.const(li * n + lj, "pairs"), axis=1)


def fm(g, fields):
    """``FMInteraction(reduce=True)``: ``[B, 1]``, ``0.5·Σ_d((Σ_f e)² − Σ_f e²)``."""
    s = g.reduce_sum(fields, [1], False)
    q = g.reduce_sum(g.op("Mul", fields, fields), [1], False)
    y = g.reduce_sum(g.op("Sub", g.op("Mul", s, s), q), [1], True)
    return g.op("Mul", y, g.const(np.float32(0.5), "half"))


def cross(g, x0, xl, layer):
    """``CrossLayer``: ``x0 ⊙ (xl·W + b) + xl``, ``W = U·Vᵀ`` applied as two products when low-rank."""
    if layer.form == "matrix":
        xw = g.op("MatMul", xl, g.const(array(layer.weight), "cross_w"))
    else:
        xu = g.op("MatMul", xl, g.const(array(layer.u), "cross_u"))
        xw = g.op("MatMul", xu, g.const(array(layer.v).T, "cross_vt"))
    return g.op("Add", g.op("Mul", x0, g.op("Add", xw, g.const(array(layer.bias), "cross_b"))), xl)


def cin(g, fields, m, D, net):
    """``CIN``: layer k is ``W_k [H_out, H·m]`` times the pairwise products ``[B, H·m, D]``, sum-pooled over D;
    a Linear maps the pooled layers to ``[B, 1]``."""
    x, h, pooled = fields, m, []
    x0 = g.reshape(fields, [-1, 1, m, D])
    for layer in net.layers:
        z = g.op("Mul", g.reshape(x, [-1, h, 1, D]), x0)  # [B, H, m, D]: column i·m + j of W weighs x[i]·x0[j]
        w = array(layer.weight)
        x = g.op("MatMul", g.const(w, "cin_w"), g.reshape(z, [-1, h * m, D]))  # [B, H_out, D]
        h = w.shape[0]
        pooled.append(g.reduce_sum(x, [2], False))
    return linear(g, g.op("Concat", *pooled, axis=1), net.out)


def first_order(g, layer, dense, weights):
    """``FirstOrder``: ``b + Σ_f weight(key_f) (+ w·dense)``, ``[B]``."""
    y = g.op("Add", g.reduce_sum(weights, [1, 2], False), g.const(array(layer.bias), "first_b"))
    if layer.weight is None:
        return y
    wd = g.op("MatMul", dense, g.const(array(layer.weight).T, "first_w"))
    return g.op("Add", y, g.reshape(wd, [-1]))
