"""DeepFM (Guo et al. 2017, "DeepFM: A Factorization-Machine based Neural Network for CTR Prediction").

Three terms summed into the logit, all reading the same embeddings: the first-order weights (a logistic
regression), the factorization machine's pairwise interactions (the fused ``FMInteraction`` kernel), and a deep
MLP over the flattened fields. Dense features enter as one more field (``Linear(n_dense, D)``), so they take
part in the FM and the MLP, and in the first-order term as ``w·dense``.
"""
from gpuemb.kernels.fm import FMInteraction
from gpuemb.nn import MLP

from .base import RecModel
from .layers import DenseField, FirstOrder


class DeepFM(RecModel):
    """DeepFM. Hyperparameters (the paper's Criteo setup: 400-400-400, dropout 0.5; scaled down for CPU runs):

    - ``deep=(256, 128)``: hidden widths of the MLP over the ``(F + 1)·D`` flattened fields (ReLU).
    - ``dropout=0.0``: after each hidden layer of the MLP.
    """

    defaults = {"deep": (256, 128), "dropout": 0.0}
    interaction_name = "FM (pairwise dot products)"
    first_order = True

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        D = self.embeddings.dim
        self.n_fields = self.embeddings.n_features + (1 if self.n_dense else 0)
        self.dense_field = DenseField(self.n_dense, D, seed=self.next_seed())
        self.first = FirstOrder(self.n_dense)
        self.deep = MLP([self.n_fields * D, *self.sizes("deep"), 1], self.probability("dropout"),
                        seed=self.next_seed())

    def interaction(self, fields):
        """The explicit interaction term ``[B, 1]`` of the fields ``[B, m, D]``: the FM."""
        return FMInteraction(reduce=True).apply(fields)

    def head(self, dense, emb, weights):
        x = self.dense_input(dense, emb.shape[0])
        fields = self.dense_field(x, emb)
        deep = self.deep(fields.reshape(fields.shape[0], -1)).reshape(-1)
        return self.first(x, weights) + self.interaction(fields).reshape(-1) + deep
