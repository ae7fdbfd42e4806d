"""PNN, the inner-product form IPNN (Qu et al. 2016, "Product-based Neural Networks for User Response
Prediction").

The product layer holds the linear signal z (the fields themselves) and p, the inner products of every pair of
fields, computed by the fused dot-interaction kernel. The paper's first hidden layer is ``relu(W_z·z + W_p·p +
b)``: one Linear over ``[z, p]``, so here the MLP reads that concatenation (the paper's rank-1 factorisation of
``W_p`` is a memory saving left out). Dense features enter as one more field (``Linear(n_dense, D)``).
"""
from gpuemb.autograd import concat, slice_axis
from gpuemb.kernels.dot_interaction import DotInteraction, pair_count
from gpuemb.nn import MLP

from .base import RecModel
from .layers import DenseField


class PNN(RecModel):
    """IPNN. Hyperparameters (the paper's Criteo setup has three hidden layers; scaled down for CPU runs):

    - ``deep=(256, 128)``: hidden widths of the MLP over ``[z, p]``, ``m·D + m(m-1)/2`` inputs for m fields
      (ReLU). ``dropout=0.0``: after each hidden layer.
    """

    defaults = {"deep": (256, 128), "dropout": 0.0}
    interaction_name = "inner products"

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        D = self.embeddings.dim
        m = self.embeddings.n_features + (1 if self.n_dense else 0)
        if m < 2:
            raise ValueError(f"PNN: {m} field; its products need at least two (sparse features, plus one field "
                             "for the dense features if there are any)")
        self.dense_field = DenseField(self.n_dense, D, seed=self.next_seed())
        width = m * D + pair_count(m)
        self.deep = MLP([width, *self.sizes("deep"), 1], self.probability("dropout"), seed=self.next_seed())

    def head(self, dense, emb):
        fields = self.dense_field(self.dense_input(dense, emb.shape[0]), emb)
        B, _, D = fields.shape
        # The interaction's output is [field 0, the pairs]: field 0 is in z already, so keep the pairs only.
        pairs = DotInteraction(pad_to=1, precision=self.precision).apply(fields[:, 0], fields[:, 1:])
        z_p = concat([fields.reshape(B, -1), slice_axis(pairs, D, pairs.shape[1], axis=1)], axis=1)
        return self.deep(z_p).reshape(-1)
