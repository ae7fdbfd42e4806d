"""The peer of ``tools/bench_train.py``: a plain PyTorch DLRM of the same config, trained on the same batches.

One ``nn.EmbeddingBag`` per table (``sparse=True``, so a step's gradient holds only the rows it touched), the
bottom MLP to the embedding dim, the pairwise dot products of the F + 1 vectors (the lower triangle of their
Gram matrix, as in Facebook's ``dlrm_s_pytorch.py``), the top MLP, BCE with logits, and one SGD or Adagrad over
every parameter (both take sparse gradients). ``torch`` is imported only here, so the benchmark runs without it.
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


def build(n_dense, cardinalities, dim, bottom, top, seed=0):
    """The DLRM as an ``nn.Module``: ``forward(dense [B, n_dense], sparse [B, T]) -> logits [B]``."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cardinalities)
            for t, c in zip(self.tables, cardinalities):  # as dlrm_s_pytorch.py: small rows, a loss near log 2
                nn.init.uniform_(t.weight, -c ** -0.5, c ** -0.5)
            self.bottom = _mlp(nn, [n_dense, *bottom, dim], last_relu=True)
            F = len(cardinalities) + 1
            self.li, self.lj = torch.tril_indices(F, F, -1)
            self.top = _mlp(nn, [dim + F * (F - 1) // 2, *top, 1], last_relu=False)

        def forward(self, dense, sparse):
            x = self.bottom(dense)
            T = torch.stack([x] + [t(sparse[:, i:i + 1]) for i, t in enumerate(self.tables)], dim=1)
            Z = torch.bmm(T, T.transpose(1, 2))[:, self.li, self.lj]
            return self.top(torch.cat([x, Z], dim=1)).squeeze(1)

    return DLRM()


def dense_optimizer(optimizer, params, lr):
    """torch's SGD or Adagrad (for "adagrad" and "rowwise_adagrad" alike: row-wise is a rule of rows only)."""
    import torch

    return (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adagrad)(params, lr=lr)


def samples_per_s(model, batches, warmup, steps, optimizer="adagrad", lr=0.01, cuda=False, inputs=None,
                  params=None):
    """Train ``model`` on ``warmup + steps`` batches of ``batches`` (an iterator of gpuemb ``Batch``, NumPy or
    CuPy arrays, taken through DLPack without a copy); returns (samples/s over the last ``steps``, their mean
    loss). ``cuda``: train on the GPU, where gpuemb trains. ``inputs(dense, sparse)``: the model's arguments
    (by default the two tensors), made inside the timed loop as a user's input pipeline would; ``params``: those
    the dense optimizer steps (by default all: plain torch's sparse tables take its sparse gradients)."""
    import torch

    warnings.filterwarnings("ignore", "Sparse invariant checks")  # torch's note on every sparse Adagrad step
    device = torch.device("cuda" if cuda else "cpu")
    model = model.to(device)
    opt = dense_optimizer(optimizer, model.parameters() if params is None else params, lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    sync = torch.cuda.synchronize if cuda else None
    losses, samples = [], 0
    for i in range(warmup + steps):
        if i == warmup:
            if sync:
                sync()
            start = time.perf_counter()
        batch = next(batches)
        label, dense, sparse = (torch.from_dlpack(a).to(device) for a in batch.arrays())
        logits = model(*(inputs(dense, sparse) if inputs else (dense, sparse)))
        loss = loss_fn(logits.reshape(label.shape), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= warmup:
            losses.append(loss.item())
            samples += batch.rows
    if sync:
        sync()
    return samples / (time.perf_counter() - start), sum(losses) / len(losses)
