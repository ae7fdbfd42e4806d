"""Each model's head against central differences in float64, on a tiny instance and fresh random inputs.

The fused kernels (dot interaction, cross, FM, the fused MLP) are numba functions typed by their inputs, so with
float64 parameters and inputs they run the same code in float64: the check goes through the real kernels.
"""
import pytest

from gpuemb.models import build

B, F, D = 4, 3, 4

# (model, n_dense, tiny hyperparameters); no dropout: every central difference must see the same function
CASES = [
    ("dlrm", 3, {"bottom": (5,), "top": (6,)}),
    ("dlrm", 2, {"bottom": (), "top": (5, 3), "self_interaction": True}),
    ("dcn", 3, {"n_cross": 2, "deep": (5,)}),
    ("dcn", 2, {"n_cross": 2, "rank": 3, "structure": "parallel", "deep": (4, 3)}),
    ("dcn", 0, {"n_cross": 1, "rank": 2, "structure": "parallel", "deep": ()}),
    ("dcn", 3, {"n_cross": 2, "rank": 3, "deep": (4,), "bottom": (5, 2)}),
    ("deepfm", 3, {"deep": (5,)}),
    ("deepfm", 0, {"deep": (4, 3)}),
    ("xdeepfm", 3, {"cin": (3, 2), "deep": (4,)}),
    ("xdeepfm", 0, {"cin": (2,), "deep": ()}),
    ("pnn", 3, {"deep": (5,)}),
    ("pnn", 0, {"deep": (4, 3)}),
    ("wide_deep", 3, {"deep": (5,)}),
    ("wide_deep", 0, {"deep": ()}),
    ("mmoe", 3, {"n_experts": 3, "expert": (5, 4), "tower": (3,)}),
    ("mmoe", 2, {"n_tasks": 3, "n_experts": 2, "expert": (3,), "tower": ()}),
]


@pytest.mark.parametrize("name, n_dense, hyper", CASES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)])
def test_head_gradients(name, n_dense, hyper, make_tables, head_gradcheck, rng):
    model = build(name, n_dense, make_tables(F, D), seed=3, **hyper)
    embedded = [rng.standard_normal((B, F, D)), rng.standard_normal((B, F, 1))][:2 if model.first_order else 1]
    assert head_gradcheck(model, [rng.standard_normal((B, n_dense)), *embedded]) == len(model.parameters()) > 0
