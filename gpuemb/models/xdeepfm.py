"""xDeepFM (Lian et al. 2018, "xDeepFM: Combining Explicit and Implicit Feature Interactions for Recommender
Systems").

Three terms summed into the logit: the first-order weights (a logistic regression), the Compressed Interaction
Network (CIN: explicit crosses of bounded degree, vector-wise), and a deep MLP over the flattened fields. Dense
features enter as one more field (``Linear(n_dense, D)``), so the CIN and the MLP see them, and the first-order
term as ``w·dense``.

The CIN is ``cin.py``.
"""
from .cin import CIN
from .deepfm import DeepFM


class XDeepFM(DeepFM):
    """xDeepFM: DeepFM with the CIN in place of the FM. Hyperparameters (the paper's Criteo setup: CIN
    200-200-200, DNN 400-400; scaled down for CPU runs):

    - ``cin=(32, 32)``: feature maps of each CIN layer.
    - ``deep=(256, 128)``: hidden widths of the MLP over the ``(F + 1)·D`` flattened fields (ReLU).
    - ``dropout=0.0``: after each hidden layer of the MLP.
    """

    defaults = {"cin": (32, 32), **DeepFM.defaults}
    interaction_name = "CIN (and FM)"

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        self.cin = CIN(self.n_fields, self.sizes("cin", allow_empty=False), seed=self.next_seed())

    def interaction(self, fields):
        return self.cin(fields)
