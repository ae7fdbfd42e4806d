"""The tape: recording, accumulation, no_grad, detach, and the errors that name what went wrong."""
import numpy as np
import pytest

from gpuemb import autograd as ag
from gpuemb.autograd import Tensor


def leaf(xp, rng, *shape, dtype=np.float64):
    return Tensor(xp.asarray(rng.standard_normal(shape).astype(dtype)), requires_grad=True)


def host(a):
    return ag.backend.to_host(a)


def test_tensor_used_twice_accumulates(xp, rng):
    x = leaf(xp, rng, 3)
    (x * x + x).sum().backward()
    np.testing.assert_allclose(host(x.grad), 2 * host(x.data) + 1)


def test_backward_twice_adds_into_grad(xp, rng):
    x = leaf(xp, rng, 4)
    y = (x * 3).sum()
    y.backward()
    y.backward()
    np.testing.assert_allclose(host(x.grad), np.full(4, 6.0))


def test_leaf_grads_are_not_aliased(xp, rng):
    a, b = leaf(xp, rng, 3), leaf(xp, rng, 3)
    (a + b).sum().backward()
    a.grad *= 10  # an in-place edit (as a loss scaler does) must not reach b
    np.testing.assert_allclose(host(b.grad), np.ones(3))


def test_no_grad_records_nothing(xp, rng):
    x = leaf(xp, rng, 3)
    with ag.no_grad():
        y = (x * 2).sum()
    assert not y.requires_grad and y.creator is None
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        y.backward()
    assert ag.is_grad_enabled()


def test_detach_cuts_the_tape(xp, rng):
    x = leaf(xp, rng, 3)
    y = x * 2
    z = (y.detach() * x).sum()
    z.backward()
    np.testing.assert_allclose(host(x.grad), 2 * host(x.data))
    assert y.detach().data is y.data


def test_constant_inputs_get_no_gradient(xp, rng):
    x = leaf(xp, rng, 3)
    c = Tensor(xp.asarray(rng.standard_normal(3)))
    (x * c).sum().backward()
    assert c.grad is None
    np.testing.assert_allclose(host(x.grad), host(c.data))


def test_unused_output_of_a_split_gets_zero_gradient(xp, rng):
    x = leaf(xp, rng, 4, 2)
    a, _ = ag.split(x, 2, axis=0)
    a.sum().backward()
    np.testing.assert_allclose(host(x.grad), np.r_[np.ones((2, 2)), np.zeros((2, 2))])


def test_diamond_graph_order(xp, rng):
    # c depends on b and a; b depends on a: a wrong topological order would drop c's part of a's gradient
    a = leaf(xp, rng, 3)
    b = a * 2
    c = b * a
    (c + b).sum().backward()
    np.testing.assert_allclose(host(a.grad), 4 * host(a.data) + 2)


def test_deep_graph_does_not_recurse(rng):
    x = leaf(np, rng, 2)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad, np.full(2, 1.0001 ** 5000))


def test_float32_stays_float32_with_python_scalars(xp, rng):
    x = leaf(xp, rng, 3, dtype=np.float32)
    y = (2.0 * x + 1.0) / 3.0 - x ** 2
    y.sum().backward()
    assert y.dtype == np.float32 and x.grad.dtype == np.float32


def test_shape_error_names_op_and_shapes(rng):
    a, b = leaf(np, rng, 3, 4), leaf(np, rng, 5, 6)
    with pytest.raises(ag.ShapeError, match=r"matmul: shapes \(3, 4\) and \(5, 6\)"):
        a @ b
    with pytest.raises(ag.ShapeError, match=r"add: shapes \(3, 4\) and \(5, 6\)"):
        a + b
    with pytest.raises(ag.ShapeError, match=r"linear: input of shape \(3, 4\).*weight of shape \(5, 6\)"):
        ag.linear(a, b)
    with pytest.raises(ag.ShapeError, match=r"concat: shapes \(3, 4\) and \(5, 6\)"):
        ag.concat([a, b], axis=1)
    with pytest.raises(ag.ShapeError, match=r"reshape: cannot reshape \(3, 4\)"):
        a.reshape(5, 3)
    with pytest.raises(ag.ShapeError, match=r"BCEWithLogits: prediction of shape \(3, 4\) and target of shape \(4,\)"):
        ag.bce_with_logits(a, np.zeros(4))


def test_backward_needs_a_scalar_or_a_gradient(rng):
    x = leaf(np, rng, 3)
    with pytest.raises(ag.ShapeError, match="single-element"):
        (x * 2).backward()
    (x * 2).backward(np.ones(3))
    np.testing.assert_allclose(x.grad, np.full(3, 2.0))


def test_bce_with_logits_is_finite_for_huge_logits():
    x = Tensor(np.array([1e4, -1e4, 80.0, -80.0], dtype=np.float32), requires_grad=True)
    t = np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)
    loss = ag.bce_with_logits(x, t, reduction="none")
    np.testing.assert_allclose(loss.data, [0.0, 0.0, 80.0, 80.0], rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(x.grad, [0.0, 0.0, 1.0, -1.0], atol=1e-6)


def test_ops_match_numpy_values(xp, rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    ta, tb = Tensor(xp.asarray(a)), Tensor(xp.asarray(b))
    np.testing.assert_allclose(host(ag.softmax(ta).data), np.exp(a) / np.exp(a).sum(1, keepdims=True))
    np.testing.assert_allclose(host(ag.log_softmax(ta).data), a - np.log(np.exp(a).sum(1, keepdims=True)))
    np.testing.assert_allclose(host((ta @ tb).data), a @ b)
    np.testing.assert_allclose(host(ta.sigmoid().data), 1 / (1 + np.exp(-a)))
    np.testing.assert_allclose(host(ag.mse(ta, Tensor(xp.asarray(2 * a))).data), np.mean(a * a))


def test_dlpack_and_numpy_interchange(rng):
    x = Tensor(rng.standard_normal((2, 3)).astype(np.float32))
    np.testing.assert_array_equal(np.from_dlpack(x), x.data)
    assert not hasattr(x, "__cuda_array_interface__")  # host data: no false promise of a device pointer
    np.testing.assert_array_equal(x.numpy(), x.data)
