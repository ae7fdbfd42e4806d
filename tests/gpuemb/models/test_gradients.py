"""Each model's head against central differences in float64, on a tiny instance and fresh random inputs.

The fused kernels (dot interaction, cross, FM, the fused MLP) are numba functions typed by their inputs, so with
float64 parameters and inputs they run the same code in float64: the check goes through the real kernels.
"""
import pytest

from gpuemb.models import build

B, F, D, N_DENSE = 4, 3, 4, 3

# (model, tiny hyperparameters); no dropout: every central difference must see the same function
CASES = [
    ("dlrm", {"bottom": (5,), "top": (6,)}),
    ("dlrm", {"bottom": (), "top": (5, 3), "self_interaction": True}),
]


@pytest.mark.parametrize("name, hyper", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_head_gradients(name, hyper, make_tables, head_gradcheck, rng):
    model = build(name, N_DENSE, make_tables(F, D), seed=3, **hyper)
    embedded = [rng.standard_normal((B, F, D)), rng.standard_normal((B, F, 1))][:2 if model.first_order else 1]
    assert head_gradcheck(model, [rng.standard_normal((B, N_DENSE)), *embedded]) == len(model.parameters()) > 0
