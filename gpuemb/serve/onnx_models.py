"""The dense part of every model as an ONNX graph: ``export_onnx(model)`` wires the layer emitters as the
model's ``head`` does, over graph inputs ``dense [B, n_dense]`` (absent when n_dense is 0), ``embeddings
[B, F, D]`` (``[B, width]``, each feature's rows side by side, where the tables have several dims) and, for
first-order models, ``first_order [B, F, 1]``. The outputs are ``logits`` (``[B]``, or ``[B, T]`` for MMoE with
several tasks: what the model's eval forward returns) and ``probabilities``, their sigmoid."""
from gpuemb.kernels.dot_interaction import output_width
from gpuemb.models.dlrm import PAD_TO

from . import onnx_layers as L
from .onnx_graph import GraphBuilder


def dlrm(g, model, dense, emb, F, D):
    b = L.mlp(g, dense, model.bottom)
    z = g.op("Concat", g.reshape(b, [-1, 1, D]), emb, axis=1)
    x = g.op("Concat", b, L.pairs(g, z, F + 1, model.self_interaction), axis=1)
    # The fused interaction pads to a multiple of PAD_TO with zeros: the top MLP reads only the real columns.
    real, padded = output_width(F, D, model.self_interaction, 1), output_width(F, D, model.self_interaction, PAD_TO)
    if padded != model.top.layers[0].weight.shape[1]:
        raise ValueError(f"export: DLRM's top MLP reads {model.top.layers[0].weight.shape[1]} columns, not the "
                         f"{padded} of its interaction; update gpuemb/serve/onnx_models.py to the model's padding")
    return g.reshape(L.mlp(g, x, model.top, in_columns=real), [-1])


def dcn(g, model, dense, emb, F, D):
    x0 = L.flat_with_dense(g, emb, dense if model.bottom is None else L.mlp(g, dense, model.bottom),
                            model.embeddings.width)
    x = x0
    for layer in model.cross:
        x = L.cross(g, x0, x, layer)
    if model.structure == "stacked":
        return g.reshape(L.mlp(g, x, model.deep), [-1])
    both = x if model.deep is None else g.op("Concat", x, L.mlp(g, x0, model.deep), axis=1)
    return g.reshape(L.linear(g, both, model.out), [-1])


def deepfm(g, model, dense, emb, F, D, first):
    fields = L.dense_field(g, model.dense_field, dense, emb, F, D)
    deep = g.reshape(L.mlp(g, g.reshape(fields, [-1, model.n_fields * D]), model.deep), [-1])
    explicit = L.cin(g, fields, model.n_fields, D, model.cin) if hasattr(model, "cin") else L.fm(g, fields)
    y = g.op("Add", L.first_order(g, model.first, dense, first), g.reshape(explicit, [-1]))
    return g.op("Add", y, deep)


def pnn(g, model, dense, emb, F, D):
    fields = L.dense_field(g, model.dense_field, dense, emb, F, D)
    m = F + (1 if dense is not None else 0)
    z_p = g.op("Concat", g.reshape(fields, [-1, m * D]), L.pairs(g, fields, m), axis=1)
    return g.reshape(L.mlp(g, z_p, model.deep), [-1])


def wide_deep(g, model, dense, emb, F, D, first):
    deep = g.reshape(L.mlp(g, L.flat_with_dense(g, emb, dense, model.embeddings.width), model.deep), [-1])
    return g.op("Add", L.first_order(g, model.wide, dense, first), deep)


def mmoe(g, model, dense, emb, F, D):
    x = L.flat_with_dense(g, emb, dense, model.embeddings.width)
    H = model.experts[0].layers[-1].weight.shape[0]
    experts = g.op("Concat", *[g.reshape(L.mlp(g, x, e), [-1, 1, H]) for e in model.experts], axis=1)  # [B, E, H]
    logits = []
    for gate, tower in zip(model.gates, model.towers):
        weights = g.reshape(g.op("Softmax", L.linear(g, x, gate), axis=-1), [-1, 1, len(model.experts)])
        mixed = g.reshape(g.op("MatMul", weights, experts), [-1, H])
        logits.append(L.mlp(g, mixed, tower))
    return g.op("Concat", *logits, axis=1) if model.n_tasks > 1 else g.reshape(logits[0], [-1])


EMITTERS = {"DLRM": dlrm, "DCNv2": dcn, "DeepFM": deepfm, "XDeepFM": deepfm, "PNN": pnn, "WideDeep": wide_deep,
            "MMoE": mmoe}


def export_onnx(model):
    """The ``onnx.ModelProto`` of ``model``'s dense part (a ``gpuemb.models`` model)."""
    kind = type(model).__name__
    if kind not in EMITTERS:
        raise ValueError(f"export: no ONNX emitter for {kind}; add one to gpuemb/serve/onnx_models.py")
    F, D = model.embeddings.n_features, model.embeddings.dim
    emb = ["B", F, D] if D is not None else ["B", model.embeddings.width]  # mixed dims: the rows side by side
    inputs = ([("dense", ["B", model.n_dense])] if model.n_dense else []) + [("embeddings", emb)]
    if model.first_order:
        inputs.append(("first_order", ["B", F, 1]))
    g = GraphBuilder()
    dense = "dense" if model.n_dense else None
    extra = ("first_order",) if model.first_order else ()
    logits = g.rename(EMITTERS[kind](g, model, dense, "embeddings", F, D, *extra), "logits")
    g.rename(g.op("Sigmoid", logits), "probabilities")
    shape = ["B", model.n_tasks] if model.n_tasks > 1 else ["B"]
    return g.build(inputs, [("logits", shape), ("probabilities", shape)], kind)

