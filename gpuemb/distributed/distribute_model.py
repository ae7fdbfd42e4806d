"""Turn a model built for one process into its part of a data- and model-parallel job.

``distribute(model, comm)`` replaces every ``EmbeddingCollection`` attribute of the model (``embeddings``, and
``linear_embeddings`` for first-order models) by a ``ShardedEmbeddingCollection`` of the same tables (of one dim or
several), pooling by the same ``mode`` and ``hotness``, sets the dense parameters to rank 0's values, and returns the
``GradientAllreduce`` to call each step between ``loss.backward()`` and ``optimizer.step()``.
"""
from gpuemb.sharding.plan import HOST_KINDS
from gpuemb.store.collection import EmbeddingCollection

from .sharded_collection import ShardedEmbeddingCollection
from .dense import GradientAllreduce, broadcast_parameters
from .default_plan import plan_for
from .hosts import local_ranks


def _collections(model):
    return [(name, value) for name, value in vars(model).items() if isinstance(value, EmbeddingCollection)]


def _hotness(found):
    """``{table: keys a sample}`` of the collections' per-feature tables whose feature pools a fixed number of keys
    (a shared table's features stay one key each: ``plan_for``)."""
    return {t.config.name: h for _, c in found if c.hotness is not None and not c.shared
            for t, h in zip(c.tables, c.hotness)}


def distribute(model, comm, plan=None, codecs=None, bucket_bytes=None, dedup=False, **planning):
    """Shard ``model``'s embedding collections over ``comm`` by ``plan`` (default: ``plan_for`` all their
    tables, given ``planning``: ``batch_size``, ``codec``, ``sharding``, ``rows``...; ``table_row`` and ``grid``
    find the ranks of a host by ``hosts.local_ranks`` unless ``local_ranks`` is given), with the all-to-alls in
    ``codecs`` (and single keys sent once a rank where ``dedup``: ``ShardedEmbeddingCollection``); returns the
    dense ``GradientAllreduce``. Build the model the same way (seed included) on every rank."""
    found = _collections(model)
    if not found:
        raise ValueError(f"distribute: {type(model).__name__} has no EmbeddingCollection attribute to shard")
    if plan is None:
        configs = [t.config for _, c in found for t in c.tables]
        if planning.get("sharding") in HOST_KINDS and planning.get("local_ranks") is None:
            planning["local_ranks"] = local_ranks(comm)
        planning.setdefault("hotness", _hotness(found))
        plan = plan_for(configs, comm.world_size, max(c.n_features if c.shared else 1 for _, c in found), **planning)
    for name, c in found:
        sharded = ShardedEmbeddingCollection([t.config for t in c.tables], comm, plan, codecs,
                                             c.n_features if c.shared else None, c.mode, c.hotness, c.dim is None,
                                             dedup)
        for t in c.tables:
            t.close()
        setattr(model, name, sharded.train(model.training))
    broadcast_parameters(model.parameters(), comm)
    return GradientAllreduce(model.parameters(), comm, bucket_bytes)
