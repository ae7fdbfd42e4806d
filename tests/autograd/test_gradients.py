"""Every differentiable op against central differences in float64, on fresh random inputs."""
import numpy as np
import pytest

from gpuemb import autograd as ag


def randn(rng, *shape):
    return rng.standard_normal(shape)


def positive(rng, *shape):
    return rng.uniform(0.5, 2.0, shape)


# name -> (function of Tensors, input factory). Shapes that broadcast are included on purpose.
CASES = {
    "add": (lambda a, b: a + b, lambda r: (randn(r, 3, 4), randn(r, 3, 4))),
    "add_broadcast": (lambda a, b: a + b, lambda r: (randn(r, 2, 3, 4), randn(r, 3, 1))),
    "add_scalar": (lambda a: 2.5 + a, lambda r: (randn(r, 3),)),
    "sub": (lambda a, b: a - b, lambda r: (randn(r, 4, 1), randn(r, 1, 5))),
    "rsub_scalar": (lambda a: 1.0 - a, lambda r: (randn(r, 3, 2),)),
    "mul": (lambda a, b: a * b, lambda r: (randn(r, 3, 4), randn(r, 4))),
    "div": (lambda a, b: a / b, lambda r: (randn(r, 3, 4), positive(r, 3, 1))),
    "rdiv_scalar": (lambda a: 3.0 / a, lambda r: (positive(r, 5),)),
    "neg": (lambda a: -a, lambda r: (randn(r, 2, 3),)),
    "pow_scalar": (lambda a: a ** 3, lambda r: (randn(r, 3, 3),)),
    "pow_tensor": (lambda a, b: a ** b, lambda r: (positive(r, 3, 2), randn(r, 3, 2))),
    "matmul": (lambda a, b: a @ b, lambda r: (randn(r, 3, 4), randn(r, 4, 5))),
    "matmul_batched_broadcast": (lambda a, b: a @ b, lambda r: (randn(r, 2, 3, 4), randn(r, 4, 2))),
    "matmul_vector": (lambda a, b: ag.matmul(a, b), lambda r: (randn(r, 4), randn(r, 4, 3))),
    "linear": (lambda x, W, b: ag.linear(x, W, b), lambda r: (randn(r, 5, 4), randn(r, 3, 4), randn(r, 3))),
    "linear_3d_no_bias": (lambda x, W: ag.linear(x, W), lambda r: (randn(r, 2, 5, 4), randn(r, 3, 4))),
    "relu": (lambda a: a.relu(), lambda r: (randn(r, 4, 5),)),
    "sigmoid": (lambda a: a.sigmoid(), lambda r: (randn(r, 4, 5) * 3,)),
    "tanh": (lambda a: a.tanh(), lambda r: (randn(r, 4, 5),)),
    "exp": (lambda a: a.exp(), lambda r: (randn(r, 4, 5),)),
    "log": (lambda a: a.log(), lambda r: (positive(r, 4, 5),)),
    "sum_all": (lambda a: a.sum(), lambda r: (randn(r, 3, 4),)),
    "sum_axis": (lambda a: a.sum(axis=1), lambda r: (randn(r, 3, 4, 2),)),
    "sum_axes_keepdims": (lambda a: a.sum(axis=(0, 2), keepdims=True), lambda r: (randn(r, 3, 4, 2),)),
    "mean_all": (lambda a: a.mean(), lambda r: (randn(r, 3, 4),)),
    "mean_negative_axis_keepdims": (lambda a: a.mean(axis=-1, keepdims=True), lambda r: (randn(r, 3, 4),)),
    "reshape": (lambda a: a.reshape(4, 3) * ag.Tensor(np.arange(12.0).reshape(4, 3)), lambda r: (randn(r, 3, 4),)),
    "transpose": (lambda a: a.T @ a, lambda r: (randn(r, 3, 4),)),
    "transpose_axes": (lambda a: a.transpose(1, 2, 0), lambda r: (randn(r, 2, 3, 4),)),
    "concat": (lambda a, b: ag.concat([a, b, a], axis=1), lambda r: (randn(r, 3, 2), randn(r, 3, 4))),
    "split": (lambda a: ag.split(a, [1, 3], axis=1)[1] * 2 + ag.split(a, [1, 3], axis=1)[0],
              lambda r: (randn(r, 3, 4),)),
    "split_unused_piece": (lambda a: ag.split(a, 2, axis=0)[0], lambda r: (randn(r, 4, 3),)),
    "slice_axis": (lambda a: ag.slice_axis(a, 1, 3, axis=1), lambda r: (randn(r, 3, 4),)),
    "getitem_basic": (lambda a: a[1:, ::2], lambda r: (randn(r, 3, 4),)),
    "getitem_repeated_index": (lambda a: a[np.array([0, 2, 0, 0])], lambda r: (randn(r, 3, 4),)),
    "take_rows_repeated": (lambda a: ag.take(a, np.array([[2, 0], [2, 2]])), lambda r: (randn(r, 3, 4),)),
    "take_axis1": (lambda a: ag.take(a, np.array([3, 1, 3]), axis=1), lambda r: (randn(r, 2, 4, 2),)),
    "softmax": (lambda a: ag.softmax(a, axis=-1), lambda r: (randn(r, 3, 5),)),
    "softmax_axis0": (lambda a: ag.softmax(a, axis=0), lambda r: (randn(r, 3, 5),)),
    "log_softmax": (lambda a: ag.log_softmax(a, axis=1), lambda r: (randn(r, 3, 5),)),
    "bce_with_logits": (lambda x: ag.bce_with_logits(x, ag.Tensor(np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))),
                        lambda r: (randn(r, 2, 3) * 4,)),
    "bce_with_logits_sum": (lambda x: ag.bce_with_logits(x, np.array([0.2, 0.9, 1.0]), reduction="sum"),
                            lambda r: (randn(r, 3),)),
    "bce_with_logits_none": (lambda x: ag.bce_with_logits(x, np.array([0.0, 1.0]), reduction="none"),
                             lambda r: (randn(r, 2),)),
    "mse": (lambda p, t: ag.mse(p, t), lambda r: (randn(r, 4, 2), randn(r, 4, 2))),
    "composite_reuse": (lambda a, b: (a * b + a).sigmoid() * a - (a @ b.T).sum(axis=1, keepdims=True),
                        lambda r: (randn(r, 3, 4), randn(r, 3, 4))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_central_differences(name, rng):
    f, make = CASES[name]
    assert ag.gradcheck(f, *make(rng))


def test_gradcheck_catches_a_wrong_backward(rng):
    class BadSquare(ag.Function):
        def forward(self, x):
            self.x = x
            return x * x

        def backward(self, gy):
            return gy * self.x  # missing the factor 2

    with pytest.raises(AssertionError, match="gradcheck: input 0"):
        ag.gradcheck(lambda x: BadSquare().apply(x), randn(rng, 3))


def test_every_listed_op_has_a_gradient_case():
    checked = {"add", "sub", "mul", "div", "neg", "pow", "matmul", "linear", "relu", "sigmoid", "tanh", "exp",
               "log", "sum", "mean", "reshape", "transpose", "concat", "split", "slice_axis", "getitem", "take",
               "softmax", "log_softmax", "bce_with_logits", "mse"}
    assert checked == set(ag.ops.__all__)
    assert all(any(case.startswith(op) for case in CASES) for op in checked)
