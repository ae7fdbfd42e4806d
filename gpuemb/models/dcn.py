"""DCN-v2 (Wang et al. 2021, "DCN V2: Improved Deep & Cross Network and Practical Lessons for Web-scale Learning
to Rank Systems").

The input ``x0`` is the flattened embeddings with the dense features concatenated (as in the paper), or with
the output of a bottom MLP over the dense features (MLPerf's DLRM-DCNv2, where the 13 dense features go through
512-256-128 first, as DLRM's do, so they enter the crosses as one 128-wide field like an embedding). Cross
layers ``x_{l+1} = x0 ⊙ (x_l·W + b) + x_l`` (the fused ``Cross`` kernel; ``W = U·Vᵀ`` when low-rank) learn
explicit crosses, a deep MLP learns implicit ones; they are stacked (cross, then deep) or side by side.
"""
import numpy as np

from gpuemb.autograd import Tensor, concat
from gpuemb.autograd.backend import to_device
from gpuemb.kernels.cross import Cross
from gpuemb.nn import MLP, Linear, Module

from .base import RecModel
from .layers import flat_with_dense

STRUCTURES = ("stacked", "parallel")


class CrossLayer(Module):
    """One cross layer over ``[B, dim]``: ``weight [dim, dim]``, or ``u, v [dim, rank]`` when rank is given.

    Weights are Glorot-normal (the paper's Keras code uses Glorot), the bias starts at zero.
    """

    def __init__(self, dim, rank=None, seed=0):
        rng = np.random.default_rng(seed)

        def glorot(n_in, n_out):
            return Tensor(to_device(rng.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), (n_in, n_out)), np.float32),
                          requires_grad=True)

        self.form = "matrix" if rank is None else "lowrank"
        if rank is None:
            self.weight = glorot(dim, dim)
        else:
            self.u, self.v = glorot(dim, rank), glorot(dim, rank)
        self.bias = Tensor(to_device(np.zeros(dim), np.float32), requires_grad=True)

    def forward(self, x0, xl):
        weights = (self.weight,) if self.form == "matrix" else (self.u, self.v)
        return Cross(self.form, self.precision).apply(x0, xl, *weights, self.bias)


class DCNv2(RecModel):
    """DCN-v2. Hyperparameters (the paper's Criteo setup has 3 or 4 cross layers, a deep net of 1024 to 2048
    units a layer, and low rank r = D/4; these are scaled down for CPU runs):

    - ``n_cross=3``: cross layers.
    - ``rank=None``: full-rank ``W [d, d]``; an int r makes every layer low-rank, ``W = U·Vᵀ``, ``U, V [d, r]``.
    - ``structure="stacked"``: the deep MLP after the cross network; ``"parallel"``: both read x0 and a
      Linear maps their concatenated outputs to the logit.
    - ``deep=(256, 128)``: hidden widths of the deep MLP (ReLU). ``dropout=0.0``: after its hidden layers.
    - ``bottom=None``: the dense features are concatenated as they are; a tuple of widths puts them through the
      MLP ``[n_dense, *bottom]`` first (ReLU after every layer, the last included), and its output is
      concatenated instead. MLPerf's DLRM-DCNv2 is ``bottom=(512, 256, 128), n_cross=3, rank=512,
      deep=(1024, 1024, 512, 256)`` at D = 128.

    d = F·D + n_dense, or F·D + bottom[-1]: the dense part is concatenated to the flattened embeddings.
    """

    defaults = {"n_cross": 3, "rank": None, "structure": "stacked", "deep": (256, 128), "dropout": 0.0,
                "bottom": None}
    mixed_dims = True  # the rows go side by side into an MLP: each table may have its own dim

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        n_cross, rank, structure = self.integer("n_cross", 1), self.integer("rank", 1, True), self.hyper["structure"]
        if structure not in STRUCTURES:
            self.fail("structure", structure, f"use one of {', '.join(STRUCTURES)}")
        deep, dropout = self.sizes("deep"), self.probability("dropout")
        self.bottom = self._bottom()
        d = self.embeddings.width + (self.bottom.layers[-1].weight.shape[0] if self.bottom is not None else
                                     self.n_dense)
        self.structure = structure
        self.cross = [CrossLayer(d, rank, self.next_seed()) for _ in range(n_cross)]
        if self.structure == "stacked":
            self.deep = MLP([d, *deep, 1], dropout=dropout, seed=self.next_seed())
        else:
            self.deep = MLP([d, *deep], dropout, last_activation="relu", seed=self.next_seed()) if deep else None
            self.out = Linear(d + (deep[-1] if deep else 0), 1, seed=self.next_seed())

    def _bottom(self):
        if self.hyper["bottom"] is None:
            return None
        widths = self.sizes("bottom", allow_empty=False)
        if self.n_dense < 1:
            self.fail("bottom", self.hyper["bottom"], "a bottom MLP reads the dense features and this data has "
                      "none; leave bottom out")
        return MLP([self.n_dense, *widths], last_activation="relu", seed=self.next_seed())

    def head(self, dense, emb):
        dense = self.dense_input(dense, emb.shape[0])
        x0 = flat_with_dense(emb, dense if self.bottom is None else self.bottom(dense))
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        if self.structure == "stacked":
            return self.deep(x).reshape(-1)
        both = x if self.deep is None else concat([x, self.deep(x0)], axis=1)
        return self.out(both).reshape(-1)
