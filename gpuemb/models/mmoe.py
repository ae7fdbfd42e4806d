"""MMoE (Ma et al. 2018, "Modeling Task Relationships in Multi-task Learning with Multi-gate Mixture-of-Experts").

Shared experts read one input; each task has a gate, a softmax over the experts computed from that input, that
mixes the experts' outputs into its tower, whose output is the task's logit. The input is the flattened
embeddings with the dense features concatenated. The logits are ``[B, n_tasks]``, one column per task, in the
order of the label's columns; with one task they are ``[B]``, as every single-task model's are.
"""
from gpuemb.autograd import concat, matmul, softmax
from gpuemb.nn import MLP, Linear

from .base import RecModel
from .layers import flat_with_dense


class MMoE(RecModel):
    """MMoE. Hyperparameters (small, as the paper's census-income networks are):

    - ``n_tasks=2``: tasks, each a gate and a tower.
    - ``n_experts=4``: shared experts.
    - ``expert=(64, 32)``: widths of each expert's MLP (ReLU after every layer); the last is what gates mix.
    - ``tower=(16,)``: hidden widths of each task's tower, ``[expert[-1], *tower, 1]`` (ReLU).
    - ``dropout=0.0``: after the hidden layers of the experts and towers.
    """

    defaults = {"n_tasks": 2, "n_experts": 4, "expert": (64, 32), "tower": (16,), "dropout": 0.0}
    mixed_dims = True  # the rows go side by side into an MLP: each table may have its own dim

    def __init__(self, n_dense, tables, seed=0, **hyper):
        super().__init__(n_dense, tables, seed, **hyper)
        self.n_tasks, n_experts = self.integer("n_tasks", 1), self.integer("n_experts", 1)
        expert, tower = self.sizes("expert", allow_empty=False), self.sizes("tower")
        dropout = self.probability("dropout")
        width = self.embeddings.width + self.n_dense
        self.experts = [MLP([width, *expert], dropout, "relu", self.next_seed()) for _ in range(n_experts)]
        self.gates = [Linear(width, n_experts, self.next_seed()) for _ in range(self.n_tasks)]
        self.towers = [MLP([expert[-1], *tower, 1], dropout, seed=self.next_seed()) for _ in range(self.n_tasks)]

    def head(self, dense, emb):
        B = emb.shape[0]
        x = flat_with_dense(emb, self.dense_input(dense, B))
        experts = concat([e(x).reshape(B, 1, -1) for e in self.experts], axis=1)  # [B, n_experts, H]
        logits = []
        for gate, tower in zip(self.gates, self.towers):
            mixed = matmul(softmax(gate(x), axis=-1).reshape(B, 1, -1), experts).reshape(B, -1)  # [B, H]
            logits.append(tower(mixed))
        return concat(logits, axis=1) if self.n_tasks > 1 else logits[0].reshape(-1)
