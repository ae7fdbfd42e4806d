"""The peer a user leaving plain PyTorch picks: TorchRec's DLRM over FBGEMM's table-batched embeddings.

``torchrec.models.dlrm.DLRM`` (bottom MLP to the embedding dim, pairwise dot interaction, top MLP), or for
DLRM-DCNv2 ``DLRM_DCN`` (its low-rank cross network in place of the dot interaction, as MLPerf's reference
trains it), over a ``FusedEmbeddingBagCollection``: FBGEMM's CPU table-batched embedding, whose row optimizer runs
inside the backward, as gpuemb's rows update themselves in theirs. The rows' rule matches gpuemb's: EXACT_SGD,
EXACT_ADAGRAD or EXACT_ROWWISE_ADAGRAD; the dense layers take torch's SGD or Adagrad. The batches are gpuemb's,
turned into a KeyedJaggedTensor (each feature's ids a sample, its hotness, as one bag) inside the timed loop.

It is not an extra: torchrec 1.8's metadata asks for the CUDA build of FBGEMM, so it installs without its
dependencies, beside the CPU build (checked with torch 2.13; FBGEMM 1.9 pairs with torch 2.14):

    pip install --no-deps fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0
    pip install tensordict==0.15.3 torchmetrics==1.0.3 tqdm pyre-extensions iopath
"""
import bench_train_torch

EMBEDDINGS = "embedding_bag_collection"  # the fused tables' parameters: their optimizer is inside them


def available():
    """Whether torchrec and FBGEMM import here (a reason, or None)."""
    try:
        import fbgemm_gpu  # noqa: F401
        import torchrec  # noqa: F401
    except Exception as e:  # an ImportError, or FBGEMM's native library refusing this torch
        return f"{type(e).__name__}: {e}"
    return None


def build(n_dense, cardinalities, dim, bottom, top, optimizer, lr, cross=None, seed=0):
    """The TorchRec DLRM: ``forward(dense [B, n_dense], KeyedJaggedTensor) -> logits [B, 1]``; ``cross``:
    (layers, rank) makes it DLRM_DCN."""
    import torch
    from torchrec import EmbeddingBagConfig
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    from torchrec.optim import RowWiseAdagrad

    torch.manual_seed(seed)
    rule = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "rowwise_adagrad": RowWiseAdagrad}[optimizer]
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=c, feature_names=[f"f{i}"])
              for i, c in enumerate(cardinalities)]
    ebc = FusedEmbeddingBagCollection(tables=tables, optimizer_type=rule, optimizer_kwargs={"lr": lr},
                                      device=torch.device("cpu"))
    shape = dict(embedding_bag_collection=ebc, dense_in_features=n_dense, dense_arch_layer_sizes=[*bottom, dim],
                 over_arch_layer_sizes=[*top, 1])
    return DLRM(**shape) if cross is None else DLRM_DCN(**shape, dcn_num_layers=cross[0], dcn_low_rank_dim=cross[1])


def keyed(hotness):
    """``inputs(dense, sparse)`` for ``samples_per_s``: the sparse ids (table t's ``hotness[t]`` columns side by
    side) as a KeyedJaggedTensor, feature-major."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    keys = [f"f{i}" for i in range(len(hotness))]
    hot = torch.tensor(hotness, dtype=torch.int32)
    starts = [sum(hotness[:i]) for i in range(len(hotness))]

    def inputs(dense, sparse):
        # KJT order: all of feature 0's bags, sample by sample, then feature 1's, ...
        values = torch.cat([sparse[:, a:a + h].reshape(-1) for a, h in zip(starts, hotness)])
        lengths = hot.repeat_interleave(sparse.shape[0])
        return dense, KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
    return inputs


def samples_per_s(model, batches, warmup, steps, optimizer, lr, hotness):
    """As ``bench_train_torch.samples_per_s``; the dense optimizer steps every parameter but the fused tables'.
    ``hotness``: ids a row of each table."""
    dense = [p for name, p in model.named_parameters() if EMBEDDINGS not in name]
    return bench_train_torch.samples_per_s(model, batches, warmup, steps, optimizer, lr,
                                           inputs=keyed(hotness), params=dense)
