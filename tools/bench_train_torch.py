"""The peer of ``tools/bench_train.py``: a plain PyTorch DLRM (or DLRM-DCNv2) of the same config, trained on the
same batches.

One ``nn.EmbeddingBag`` per table (mode sum, ``sparse=True``, so a step's gradient holds only the rows it
touched), the bottom MLP to the embedding dim, then either the pairwise dot products of the F + 1 vectors (the
lower triangle of their Gram matrix, as in Facebook's ``dlrm_s_pytorch.py``) or, for DLRM-DCNv2, the low-rank
cross network ``x_{l+1} = x0 ⊙ (U·(Vᵀ·x_l) + b) + x_l`` over ``x0 = [embeddings, bottom]`` (gpuemb's order), the
top MLP, BCE with logits, and one SGD or Adagrad over every parameter (both take the tables' sparse gradients).
A multi-hot feature of h ids a row is a ``[B, h]`` input to its bag: torch's bags of one length, whose offsets
(0, h, 2h, ...) it makes itself. ``torch`` is imported only here, so the benchmark runs without it.
"""
import time
import warnings


def available():
    """Whether torch imports here."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _mlp(nn, sizes, last_relu):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def build(n_dense, cardinalities, dim, bottom, top, hotness=None, cross=None, seed=0):
    """The model as an ``nn.Module``: ``forward(dense [B, n_dense], sparse [B, sum(hotness)]) -> logits [B]``.
    ``hotness``: ids a row of each table (default one each); ``cross``: (layers, rank) of DLRM-DCNv2's crosses in
    place of the dot interaction."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    hot = tuple(hotness or (1,) * len(cardinalities))
    starts = [sum(hot[:i]) for i in range(len(hot))]
    F = len(cardinalities) + 1

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cardinalities)
            for t, c in zip(self.tables, cardinalities):  # as dlrm_s_pytorch.py: small rows, a loss near log 2
                nn.init.uniform_(t.weight, -c ** -0.5, c ** -0.5)
            self.bottom = _mlp(nn, [n_dense, *bottom, dim], last_relu=True)

        def pooled(self, sparse):
            return [t(sparse[:, a:a + h]) for t, a, h in zip(self.tables, starts, hot)]

    class DLRM(Model):
        def __init__(self):
            super().__init__()
            self.li, self.lj = torch.tril_indices(F, F, -1)
            self.top = _mlp(nn, [dim + F * (F - 1) // 2, *top, 1], last_relu=False)

        def forward(self, dense, sparse):
            x = self.bottom(dense)
            T = torch.stack([x] + self.pooled(sparse), dim=1)
            Z = torch.bmm(T, T.transpose(1, 2))[:, self.li, self.lj]
            return self.top(torch.cat([x, Z], dim=1)).squeeze(1)

    class DCN(Model):
        def __init__(self, layers, rank):
            super().__init__()
            d = F * dim

            def glorot(*shape):  # as gpuemb's CrossLayer and TorchRec's LowRankCrossNet
                return nn.Parameter(nn.init.xavier_normal_(torch.empty(*shape)))
            self.u = nn.ParameterList(glorot(d, rank) for _ in range(layers))
            self.v = nn.ParameterList(glorot(d, rank) for _ in range(layers))
            self.b = nn.ParameterList(nn.Parameter(torch.zeros(d)) for _ in range(layers))
            self.top = _mlp(nn, [d, *top, 1], last_relu=False)

        def forward(self, dense, sparse):
            x0 = torch.cat(self.pooled(sparse) + [self.bottom(dense)], dim=1)
            x = x0
            for u, v, b in zip(self.u, self.v, self.b):
                x = x0 * ((x @ u) @ v.t() + b) + x
            return self.top(x).squeeze(1)

    return DLRM() if cross is None else DCN(*cross)


def dense_optimizer(optimizer, params, lr):
    """torch's SGD or Adagrad (for "adagrad" and "rowwise_adagrad" alike: row-wise is a rule of rows only)."""
    import torch

    return (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adagrad)(params, lr=lr)


def samples_per_s(model, batches, warmup, steps, optimizer="adagrad", lr=0.01, cuda=False, inputs=None,
                  params=None, precision="fp32"):
    """Train ``model`` on ``warmup + steps`` batches of ``batches`` (an iterator of gpuemb ``Batch``, NumPy or
    CuPy arrays, taken through DLPack without a copy); returns (samples/s over the last ``steps``, their mean
    loss). ``cuda``: train on the GPU, where gpuemb trains. ``inputs(dense, sparse)``: the model's arguments
    (by default the two tensors), made inside the timed loop as a user's input pipeline would; ``params``: those
    the dense optimizer steps (by default all: plain torch's sparse tables take its sparse gradients).
    ``precision``: gpuemb's ``--precision`` as torch's users get it: TF32 matmuls for tf32, autocast for bf16 and
    fp16 (the GPU only)."""
    import contextlib

    import torch

    warnings.filterwarnings("ignore", "Sparse invariant checks")  # torch's note on every sparse Adagrad step
    device = torch.device("cuda" if cuda else "cpu")
    model = model.to(device)
    opt = dense_optimizer(optimizer, model.parameters() if params is None else params, lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    sync = torch.cuda.synchronize if cuda else None
    losses, samples = [], 0
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision) if cuda else None
    try:
        for i in range(warmup + steps):
            if i == warmup:
                if sync:
                    sync()
                start = time.perf_counter()
            batch = next(batches)
            label, dense, sparse = (torch.from_dlpack(a).to(device) for a in batch.arrays())
            with torch.autocast("cuda", half) if half else contextlib.nullcontext():
                logits = model(*(inputs(dense, sparse) if inputs else (dense, sparse)))
                loss = loss_fn(logits.reshape(label.shape).float(), label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i >= warmup:
                losses.append(loss.item())
                samples += batch.rows
        if sync:
            sync()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return samples / (time.perf_counter() - start), sum(losses) / len(losses)
