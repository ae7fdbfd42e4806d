"""The memory a run's tables and its step's activations take, for its first lines (``Run.memory()``).

The tables' bytes are their tiers' as built, by where they are: a level bounded by its rows (a device cache of
``--cache-rows``, a device home of ``max_rows``) at its bound, which it fills; an unbounded home as it is now, which
grows with its keys, by slabs. The activations are ``sharding.cost.activation_bytes`` of this rank's batch and the
model's layer widths, the estimate ``tools/plan.py`` prints too.
"""
from gpuemb.autograd import backend
from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.nn.linear import Linear
from gpuemb.sharding.cost import activation_bytes, human_bytes
from gpuemb.store.collection import EmbeddingCollection

from .table_stats import stores_of, tier_name

WHERE = {"device": "in the device tier", "host": "in host memory", "ssd": "on disk"}


def layer_widths(model):
    """The widths of a sample's activations in ``model``: its dense input, its embeddings side by side (per
    collection), and every dense layer's output."""
    widths = [getattr(model, "n_dense", 0)]
    for m in model.modules():
        if isinstance(m, (EmbeddingCollection, ShardedEmbeddingCollection)):
            widths.append(m.width)
        elif isinstance(m, Linear):
            widths.append(m.weight.shape[0])
    return widths


def table_bytes(tables):
    """``({tier: bytes}, grows)`` of the stores of ``tables``: bounded levels at their bound, the others as they
    are; ``grows``, whether an unbounded level will take more as keys come."""
    by_tier, grows = {"device": 0, "host": 0, "ssd": 0}, False
    for store in stores_of(tables).values():
        for level in store.levels:
            spec = level.tier.spec
            held = level.bound * spec.row_bytes if level.bound is not None else level.tier.nbytes
            by_tier[tier_name(level.tier)] += max(held, level.tier.nbytes)
            grows = grows or level.bound is None
    return by_tier, grows


def memory(model, tables, batch_size):
    """``{"tables": {tier: bytes}, "tables_grow", "activations", "batch", "line"}`` of a rank training ``model``
    with ``tables`` on batches of ``batch_size`` rows; ``line`` says it in one line."""
    by_tier, grows = table_bytes(tables)
    acts = activation_bytes(batch_size, layer_widths(model))
    where = ", ".join(f"{human_bytes(n)} {WHERE[tier]}" for tier, n in by_tier.items() if n)
    line = (f"memory: tables {where or '0 B'}{' now, growing with the keys' if grows else ''}; activations "
            f"{human_bytes(acts)} {'on the device' if backend.gpu_available() else 'in host memory'} "
            f"(a batch of {batch_size}, forward and "
            "backward, estimated)")
    return {"tables": by_tier, "tables_grow": grows, "activations": acts, "batch": batch_size, "line": line}
