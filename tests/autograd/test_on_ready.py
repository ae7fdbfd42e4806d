"""``backward(on_ready=)``: each leaf is handed over once, as soon as no Function still to run adds to its gradient,
with the gradient it ends with; the gradients are those of a plain backward."""
import numpy as np
import pytest

from gpuemb.autograd import Tensor


def mlp(rng, x, layers):
    """A small MLP whose first weight is used twice (a tied weight), so that its gradient has two parts."""
    h = x
    for w, b in layers:
        h = (h @ w + b).relu()
    return (h @ layers[0][0]).sum(), h


def leaves(rng, widths):
    return [(Tensor(rng.standard_normal((a, b)) * 0.5, requires_grad=True),
             Tensor(rng.standard_normal(b) * 0.1, requires_grad=True)) for a, b in zip(widths, widths[1:])]


def test_each_leaf_is_ready_once_with_its_final_gradient_and_the_last_layers_first(rng):
    widths = [6, 5, 4, 6]
    layers = leaves(rng, widths)
    x = Tensor(rng.standard_normal((7, 6)))
    plain = leaves(np.random.default_rng(0), widths)  # the same values, for a plain backward
    for (w, b), (pw, pb) in zip(layers, plain):
        pw.data[...], pb.data[...] = w.data, b.data
    mlp(rng, x, plain)[0].backward()

    seen = []
    loss, _ = mlp(rng, x, layers)
    loss.backward(on_ready=lambda leaf: seen.append((leaf, leaf.grad.copy())))
    flat = [t for pair in layers for t in pair]
    assert sorted(map(id, (t for t, _ in seen))) == sorted(map(id, flat))  # each once
    for leaf, grad in seen:
        np.testing.assert_array_equal(grad, leaf.grad)  # complete when handed over
    for (w, b), (pw, pb) in zip(layers, plain):
        np.testing.assert_array_equal(w.grad, pw.grad)
        np.testing.assert_array_equal(b.grad, pb.grad)
    order = [next(i for i, t in enumerate(flat) if t is leaf) for leaf, _ in seen]
    assert order.index(5) < order.index(3) < order.index(1)  # the last layer's bias first, the first layer's last
    assert order[-1] == 0  # the tied weight waits for its first use, the last Function to run


def test_a_leaf_that_needs_no_gradient_is_not_handed_over(rng):
    a, b = Tensor(rng.standard_normal(3), requires_grad=True), Tensor(rng.standard_normal(3))
    seen = []
    (a * b).sum().backward(on_ready=seen.append)
    assert seen == [a]


def test_a_leaf_loss_is_handed_over_itself(rng):
    a = Tensor(rng.standard_normal(1), requires_grad=True)
    seen = []
    a.backward(on_ready=seen.append)
    assert seen == [a] and a.grad.tolist() == [1.0]


def test_an_error_in_on_ready_stops_the_backward(rng):
    a = Tensor(rng.standard_normal(3), requires_grad=True)

    def refuse(leaf):
        raise RuntimeError("no room")
    with pytest.raises(RuntimeError, match="no room"):
        (a * 2).sum().backward(on_ready=refuse)
