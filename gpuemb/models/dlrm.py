"""DLRM (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and Recommendation Systems").

The dense features go through the bottom MLP to one vector of the embedding dim; the dot interaction takes the
pairwise dot products of that vector and the F embeddings; the top MLP maps ``[bottom, products]`` to a logit.
"""
from gpuemb.kernels.dot_interaction import DotInteraction, output_width
from gpuemb.nn import MLP

from .base import RecModel

PAD_TO = 8  # the interaction's width is padded to a multiple of 8, so the top MLP's GEMM gets aligned rows


class DLRM(RecModel):
    """DLRM. Hyperparameters (defaults scaled down from the paper's Criteo setup, 512-256-64-16 / 512-256-1):

    - ``bottom=(64,)``: hidden widths of the bottom MLP; it is ``[n_dense, *bottom, D]``, ReLU after every layer.
    - ``top=(256, 128)``: hidden widths of the top MLP, ``[W, *top, 1]``; W is D plus the pairs, padded to 8.
    - ``dropout=0.0``: after each hidden ReLU of the top MLP.
    - ``self_interaction=False``: also each vector's dot with itself.

    Needs ``n_dense >= 1``: the bottom MLP is how dense features enter.
    """

    defaults = {"bottom": (64,), "top": (256, 128), "dropout": 0.0, "self_interaction": False}
    interaction_name = "dot interaction"

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        if self.n_dense < 1:
            raise ValueError("DLRM: n_dense=0; its bottom MLP needs dense features. For data without dense "
                             "features use a model that takes none, such as 'dcn', 'deepfm' or 'wide_deep'")
        D, F = self.embeddings.dim, self.embeddings.n_features
        self.self_interaction = self.hyper["self_interaction"]
        if not isinstance(self.self_interaction, bool):
            self.fail("self_interaction", self.self_interaction, "use True or False")
        width = output_width(F, D, self.self_interaction, PAD_TO)
        self.bottom = MLP([self.n_dense, *self.sizes("bottom"), D], last_activation="relu", seed=self.next_seed())
        self.top = MLP([width, *self.sizes("top"), 1], dropout=self.probability("dropout"), seed=self.next_seed())

    def head(self, dense, emb):
        x = self.dense_input(dense, emb.shape[0])
        z = DotInteraction(self.self_interaction, PAD_TO, self.precision).apply(self.bottom(x), emb)
        return self.top(z).reshape(-1)
