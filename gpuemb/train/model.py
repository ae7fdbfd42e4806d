"""The model of a run: its embedding tables as ``TableConfig``s, then ``gpuemb.models.build``.

``--tables shared`` (the default) puts every sparse feature in one table, so a batch costs one lookup; with
``per-feature`` each feature has its own table, named after its column, of ``--embedding-dim`` or its own
``--table-dim NAME=DIM`` (for the models that concatenate the rows). The rows' update rule and lr come from
``--embedding-optimizer`` and ``--embedding-lr``, their tiers from ``--store``, their stored dtype from
``--embedding-dtype``, their admission and eviction from ``--admit-after`` and ``--evict-*``; new rows are drawn
from the run's seed, so a key's initial row is the same whenever it
first shows up.
"""
import os

from gpuemb import models
from gpuemb.distributed import ShardedEmbeddingCollection
from gpuemb.optim import RULES
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import SHORT_DTYPES, Initializer, TableConfig

from .errors import ConfigError


def table_configs(config, data, ssd_dir=None, lr=None):
    """One shared ``TableConfig`` or one per sparse feature; ssd tables keep their rows in ``ssd_dir``.

    lr: the tables' configured lr, ``--embedding-lr`` unless given (a resume restores the saved one). ``config``
    has its model's recipe applied (``recipes.apply``, as ``Run`` does first).
    """
    store, o = config.store, config.optimization

    def options(name):
        return store.options(os.path.join(ssd_dir, f"{name}.h5") if store.placement == "ssd" else None)

    def table(name):
        dim = config.model.table_dims.get(name, config.model.embedding_dim)
        return TableConfig(name, dim, SHORT_DTYPES[store.embedding_dtype],
                           initializer=Initializer(o.embedding_init, o.embedding_init_scale, config.run.seed,
                                                   o.embedding_init_draw),
                           rule=RULES[o.embedding_optimizer](), lr=o.embedding_lr if lr is None else lr,
                           options=options(name), admit_after=store.admit_after, evict=store.eviction(),
                           evict_every=store.evict_every, rounding=store.row_rounding,
                           track_updates=config.checkpoints.delta_every > 0)

    if config.model.tables == "shared":
        return table("embeddings")
    unknown = sorted(set(config.model.table_dims) - set(data.sparse_names))
    if unknown:
        raise ConfigError(f"--table-dim: the data has no sparse feature {unknown[0]!r}; name one of "
                          f"{', '.join(data.sparse_names)}")
    return [table(name) for name in data.sparse_names]


def build_model(config, data, ssd_dir=None, table_lr=None):
    """``gpuemb.models.build`` for this config and data; a bad hyperparameter is a ConfigError."""
    hyper = dict(config.model.args)
    if config.model.tables == "shared":
        hyper["n_features"] = data.n_features
    if config.model.name == "mmoe":
        hyper.setdefault("n_tasks", data.n_tasks)
    if getattr(data, "hotness", None):  # multi-hot: each feature's keys pooled by its collection
        hyper["hotness"] = data.hotness
    tables = table_configs(config, data, ssd_dir, table_lr)
    kind = models.MODELS[config.model.name]
    if config.model.table_dims and not kind.mixed_dims and len({t.dim for t in tables}) > 1:
        mixed = ", ".join(n for n, k in models.MODELS.items() if k.mixed_dims)
        raise ConfigError(f"--table-dim: --model {config.model.name}'s {kind.interaction_name} needs one dim for "
                          f"every table; drop --table-dim, or use a model that concatenates the rows ({mixed})")
    try:
        model = models.build(config.model.name, data.n_dense, tables, config.run.seed, **hyper)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--model {config.model.name}: {e}") from None
    model.set_precision(config.optimization.precision)  # the fused MLPs' compute; the parameters stay float32
    n_tasks = getattr(model, "n_tasks", 1)
    if n_tasks != data.n_tasks:
        hint = ("use a multi-task model (--model mmoe)" if data.n_tasks > 1 else
                "give data with that many label columns")
        raise ConfigError(f"--model {config.model.name}: predicts {n_tasks} task(s), but the data has "
                          f"{data.n_tasks} label column(s) ({', '.join(data.label_names)}); {hint}")
    return model


def collections_of(model, kind):
    """``[(attribute, collection)]`` of the model's embedding collections of class ``kind``."""
    return [(name, value) for name, value in vars(model).items() if isinstance(value, kind)]


def embedding_tables(model):
    """``{name: EmbeddingTable}`` of every table in the model's embedding collections (on a rank of several, the
    shards and replicas this rank holds)."""
    tables = {}
    for m in model.modules():
        if isinstance(m, (EmbeddingCollection, ShardedEmbeddingCollection)):
            for t in m.tables:
                if t.config.name in tables:
                    raise ValueError(f"the model has two tables named {t.config.name!r}; a checkpoint keys "
                                     "tables by name, so give each its own")
                tables[t.config.name] = t
    return tables
