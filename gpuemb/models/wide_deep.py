"""Wide & Deep (Cheng et al. 2016, "Wide & Deep Learning for Recommender Systems").

The wide part is a logistic regression over the raw features (a weight per sparse key, from the dim-1
collection, and ``w·dense``); the deep part is an MLP over the flattened embeddings with the dense features
concatenated, as in the paper. The two logits are summed. The paper's hand-made cross-product features in the
wide part are not built: give them to the model as more sparse features.
"""
from gpuemb.nn import MLP

from .base import RecModel
from .layers import FirstOrder, flat_with_dense


class WideDeep(RecModel):
    """Wide & Deep. Hyperparameters (the paper's app-store model: 1024-512-256; scaled down for CPU runs):

    - ``deep=(256, 128)``: hidden widths of the MLP over ``F·D + n_dense`` inputs (ReLU).
    - ``dropout=0.0``: after each hidden layer of the MLP.
    """

    defaults = {"deep": (256, 128), "dropout": 0.0}
    mixed_dims = True  # the rows go side by side into an MLP: each table may have its own dim
    first_order = True

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        width = self.embeddings.width + self.n_dense
        self.wide = FirstOrder(self.n_dense)
        self.deep = MLP([width, *self.sizes("deep"), 1], self.probability("dropout"), seed=self.next_seed())

    def head(self, dense, emb, weights):
        x = self.dense_input(dense, emb.shape[0])
        return self.wide(x, weights) + self.deep(flat_with_dense(emb, x)).reshape(-1)
