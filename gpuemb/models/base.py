"""What every model shares: hyperparameters checked against its defaults, seeds, its embedding collections,
the dense input, and ``forward = head(dense, *embed(sparse))``.

The phases of a step that a model runs (``gpuemb.autograd.launches``): ``lookup`` in ``embed``; ``interaction`` in
``head``, but for its MLPs and dense layers (``mlp_forward``, marked in gpuemb/nn) and its dense input (``upload``).

The split lets a float64 gradient check run ``head`` on leaf tensors standing in for the embeddings, without
the store. The models' own files hold only their ``__init__`` and ``head``.
"""
import dataclasses
import os

import numpy as np

from gpuemb.autograd import Tensor, launches
from gpuemb.autograd.checks import check_int, fail, is_int
from gpuemb.autograd.backend import to_device
from gpuemb.nn import Module
from gpuemb.kernels.embedding_bag import MODES as POOLING_MODES
from gpuemb.store.collection import EmbeddingCollection
from gpuemb.store.options import Initializer, TableConfig


def linear_config(cfg):
    """The dim-1 first-order table of ``cfg``: ``<name>_linear``, zero rows, the same rule, lr and tiers.

    Zeros, as for the weights of a logistic regression: F features of uniform(-1, 1) weights would start the
    logits far from 0. An ssd home gets its own file, ``.linear`` before the suffix.
    """
    options = cfg.options
    if options.ssd_path is not None:
        root, ext = os.path.splitext(options.ssd_path)
        options = dataclasses.replace(options, ssd_path=f"{root}.linear{ext}")
    return dataclasses.replace(cfg, name=cfg.name + "_linear", dim=1, options=options,
                               initializer=Initializer("zeros", seed=cfg.initializer.seed))


class RecModel(Module):
    """A recommendation model over ``n_dense`` dense features and the sparse features of ``tables``.

    tables: a list of ``TableConfig``, one per sparse feature, or one ``TableConfig`` with ``n_features=F`` in
    the hyperparameters (one table shared by the F features). seed: every dense initialisation and dropout
    stream derives from it. Subclasses set ``defaults`` (their hyperparameters), ``first_order`` (True builds
    ``linear_embeddings``, the dim-1 weights per key) and write ``head``.
    """

    defaults = {}
    first_order = False
    n_tasks = 1
    mixed_dims = False  # True: tables of several dims are allowed (a model that concatenates the rows)
    interaction_name = "interaction"  # what needs one dim, for the error of a model that refuses several

    def __init__(self, n_dense, tables, seed=0, **hyper):
        name = type(self).__name__
        n_features, hotness = hyper.pop("n_features", None), hyper.pop("hotness", None)
        pooling = hyper.pop("pooling", "sum")
        unknown = sorted(set(hyper) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted([*self.defaults, "n_features", "hotness", "pooling"]))
            raise TypeError(f"{name}: unknown hyperparameter(s) {', '.join(unknown)}; valid ones are {valid}")
        check_int(name, "n_dense", n_dense, 0, note=" (the dense features per sample)")
        configs = self._configs(tables, n_features)
        linear = [linear_config(c) for c in configs] if self.first_order else []
        names = [c.name for c in configs + linear]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"{name}: table names {repeated} are repeated (first-order tables add '_linear' to "
                             "their table's name); a checkpoint keys tables by name, so give each its own")
        if pooling not in POOLING_MODES:
            raise ValueError(f"{name}: pooling={pooling!r}; use one of {', '.join(POOLING_MODES)} (how a multi-hot "
                             "feature's keys combine)")
        self.hyper = {**self.defaults, **hyper, "n_features": n_features, "hotness": hotness, "pooling": pooling}
        self.n_dense = int(n_dense)
        self._seeds = np.random.SeedSequence(seed)
        dims = sorted({c.dim for c in configs})
        if len(dims) > 1 and not self.mixed_dims:
            raise ValueError(f"{name}: tables of dims {dims}; its {self.interaction_name} needs one dim, so give "
                             "every table the same dim, or use a model that concatenates the rows (dcn, "
                             "wide_deep, mmoe)")
        self.embeddings = EmbeddingCollection(configs, n_features, pooling, hotness, self.mixed_dims)
        if self.first_order:  # the first-order weights of a bag add up, as a logistic regression's do
            self.linear_embeddings = EmbeddingCollection(linear, n_features, "sum", hotness)

    def _configs(self, tables, n_features):
        name = type(self).__name__
        single = isinstance(tables, TableConfig)
        tables = [tables] if single else list(tables)
        if not tables or not all(isinstance(t, TableConfig) for t in tables):
            raise ValueError(f"{name}: tables must be a TableConfig or a non-empty list of them, one per sparse "
                             "feature")
        if n_features is None and single:
            raise ValueError(f"{name}: one TableConfig is a table shared by several features: pass "
                             "n_features=F, or a list of TableConfigs, one per feature")
        if n_features is not None:
            check_int(name, "n_features", n_features, 1, note=", the features sharing the table")
            if len(tables) != 1:
                raise ValueError(f"{name}: n_features={n_features} shares one table; with a list of "
                                 f"{len(tables)} TableConfigs drop n_features (each feature has its table)")
        return tables

    # -- helpers for subclasses ---------------------------------------------------------------------------------
    def next_seed(self):
        """A fresh child seed of the model's seed, for the next layer built."""
        return int(self._seeds.spawn(1)[0].generate_state(1, np.uint64)[0])

    def fail(self, key, value, want):
        """Raise ValueError: hyperparameter ``key`` has the bad ``value``; ``want`` says what to use."""
        fail(type(self).__name__, f"{key}={value!r}; {want}")

    def sizes(self, key, allow_empty=True):
        """Hyperparameter ``key`` as a tuple of layer widths, checked."""
        value = self.hyper[key]
        if not isinstance(value, (list, tuple)) or not all(is_int(v, 1) for v in value) or not (value or allow_empty):
            self.fail(key, value, "use a " + ("" if allow_empty else "non-empty ")
                      + "tuple of layer widths, each an int >= 1")
        return tuple(int(v) for v in value)

    def integer(self, key, low, allow_none=False):
        """Hyperparameter ``key`` as an int >= ``low`` (or None where that is allowed), checked."""
        value = self.hyper[key]
        if value is None and allow_none:
            return None
        check_int(type(self).__name__, key, value, low, allow_none)
        return int(value)

    def probability(self, key):
        value = self.hyper[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            self.fail(key, value, "use a dropout probability in [0, 1)")
        return float(value)

    def dense_input(self, dense, batch):
        """``dense`` as a ``[batch, n_dense]`` Tensor: arrays are moved to the device as float32."""
        with launches.phase("upload"):
            x = dense if isinstance(dense, Tensor) else Tensor(to_device(dense, np.float32))
        if x.ndim != 2 or x.shape != (batch, self.n_dense):
            raise ValueError(f"{type(self).__name__}: dense has shape {x.shape}; want [B, n_dense] = "
                             f"[{batch}, {self.n_dense}] (B from the sparse features)")
        return x

    # -- the model ----------------------------------------------------------------------------------------------
    def embed(self, sparse):
        """The embeddings ``[B, F, D]``, then (``first_order`` models) the first-order weights ``[B, F, 1]``."""
        with launches.phase("lookup"):
            if self.first_order:
                return self.embeddings(sparse), self.linear_embeddings(sparse)
            return (self.embeddings(sparse),)

    def head(self, dense, *embedded):
        raise NotImplementedError(f"{type(self).__name__} has no head")

    def forward(self, dense, sparse):
        """Logits: ``[B]``, or ``[B, n_tasks]`` for a multi-task model."""
        embedded = self.embed(sparse)
        with launches.phase("interaction"):
            return self.head(dense, *embedded)
