import numba
import numpy as np
import pytest

from gpuemb.autograd import Tensor, gradcheck
from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.relu_dropout import (SUM_ROWS, ReLUDropout, pack_bits_ref, relu_dropout, relu_dropout_backward,
                                         relu_dropout_backward_cpu, relu_dropout_backward_cuda,
                                         relu_dropout_backward_ref, relu_dropout_backward_sum,
                                         relu_dropout_backward_sum_cpu, relu_dropout_cpu, relu_dropout_cuda,
                                         relu_dropout_ref, unpack_bits_ref)

SHAPES = [(1, 1), (1, 31), (4, 32), (7, 33), (16, 100), (3, 256)]  # cols off multiples of 32, B = 1 included


def _x(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("p", [0.0, 0.25, 0.7])
def test_cpu_matches_reference(rng, shape, p):
    x = _x(rng, shape)
    y, mask = relu_dropout_cpu(x, p, seed=11, step=5)
    y_ref, mask_ref = relu_dropout_ref(x, p, seed=11, step=5)
    np.testing.assert_array_equal(mask, mask_ref)
    np.testing.assert_array_equal(y, y_ref)


@pytest.mark.parametrize("relu", [True, False])
def test_a_slice_told_its_first_row_draws_the_whole_batchs_masks(rng, relu):
    # ranks each training a slice of the global batch draw, with row0, what one process draws on all of it
    x = _x(rng, (12, 45))
    y, mask = relu_dropout_cpu(x, 0.4, seed=3, step=9, relu=relu)
    for start, stop in [(0, 5), (5, 12), (7, 8)]:
        y_part, mask_part = relu_dropout_cpu(x[start:stop], 0.4, seed=3, step=9, relu=relu, row0=start)
        np.testing.assert_array_equal(y_part, y[start:stop])
        np.testing.assert_array_equal(mask_part, mask[start:stop])
        np.testing.assert_array_equal(mask_part, relu_dropout_ref(x[start:stop], 0.4, 3, 9, relu=relu, row0=start)[1])
    assert not np.array_equal(relu_dropout_cpu(x[5:], 0.4, seed=3, step=9)[1], mask[5:])  # row0 matters


@pytest.mark.parametrize("p", [0.4, 0.0])  # 0: the ReLU-and-bias pass that draws nothing
@pytest.mark.parametrize("shape", [(5, 70), (2, 128)])
def test_bias_plain_dropout_and_padded_rows_match_reference(rng, shape, p):
    x, bias = _x(rng, shape), _x(rng, shape[1:])
    for relu in (True, False):
        got = relu_dropout_cpu(x, p, seed=3, step=9, relu=relu, bias=bias, words_per_row=8)
        want = relu_dropout_ref(x, p, seed=3, step=9, relu=relu, bias=bias, words_per_row=8)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1].shape == (shape[0], 8) and not got[1][:, -1].any()  # padding words stay zero


@pytest.mark.parametrize("p", [0.5, 0.0])
def test_in_place_output(rng, p):
    x = _x(rng, (6, 40))
    y_ref, mask_ref = relu_dropout_ref(x, p, seed=1, step=2)
    y, mask = relu_dropout_cpu(x, p, seed=1, step=2, out=x)
    assert y is x
    np.testing.assert_array_equal(x, y_ref)
    np.testing.assert_array_equal(mask, mask_ref)


@pytest.mark.parametrize("shape", SHAPES)
def test_without_dropout_it_is_exactly_relu(rng, shape):
    x = _x(rng, shape)
    relu = np.maximum(x, 0)
    for p, training in ((0.0, True), (0.6, False)):
        y, mask = relu_dropout_cpu(x, p, seed=4, step=1, training=training)
        np.testing.assert_array_equal(y.view(np.uint32), relu.view(np.uint32))
        np.testing.assert_array_equal(unpack_bits_ref(mask, shape[1]), x > 0)


def test_mask_is_one_bit_per_element(rng):
    x = _x(rng, (8, 96))
    _, mask = relu_dropout_cpu(x, 0.3)
    assert mask.dtype == np.uint32 and mask.nbytes * 32 == x.nbytes
    _, mask = relu_dropout_cpu(_x(rng, (8, 100)), 0.3)
    assert mask.shape == (8, 4)  # ceil(100 / 32) words per row


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(rng, p):
    x = np.abs(_x(rng, (128, 1000))) + 0.1  # all positive, so only the draw drops
    y, mask = relu_dropout_cpu(x, p, seed=2024, step=3)
    kept = unpack_bits_ref(mask, x.shape[1])
    n = kept.size
    # A binomial proportion has standard deviation sqrt(p (1 - p) / n): allow 5 of them.
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_array_equal(y[kept], x[kept] * np.float32(1 / (1 - p)))
    assert not y[~kept].any()


def test_mask_combines_relu_sign_and_draw(rng):
    x = _x(rng, (64, 200))
    kept = unpack_bits_ref(relu_dropout_cpu(x, 0.5, seed=8, step=0)[1], 200)
    assert not kept[x <= 0].any()
    assert 0.4 < kept[x > 0].mean() < 0.6


def test_each_step_is_reproducible_and_new(rng):
    x = _x(rng, (32, 64))
    first = relu_dropout_cpu(x, 0.5, seed=5, step=10)[1]
    np.testing.assert_array_equal(first, relu_dropout_cpu(x, 0.5, seed=5, step=10)[1])
    assert (first != relu_dropout_cpu(x, 0.5, seed=5, step=11)[1]).any()
    assert (first != relu_dropout_cpu(x, 0.5, seed=6, step=10)[1]).any()


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_cpu_matches_reference(rng, shape):
    x, gy = _x(rng, shape), _x(rng, shape)
    _, mask = relu_dropout_cpu(x, 0.3, seed=9, step=4)
    np.testing.assert_array_equal(relu_dropout_backward_cpu(gy, mask, 1 / 0.7),
                                  relu_dropout_backward_ref(gy, mask, 1 / 0.7))


@pytest.mark.parametrize("rows", [0, 1, SUM_ROWS - 1, SUM_ROWS, 3 * SUM_ROWS + 5])
@pytest.mark.parametrize("cols", [1, 33, 100])
def test_backward_sums_the_bias_gradient_in_its_pass(rng, rows, cols):
    x, gy = _x(rng, (rows, cols)), _x(rng, (rows, cols))
    _, mask = relu_dropout_cpu(x, 0.3, seed=9, step=4)
    gx_ref = relu_dropout_backward_ref(gy, mask, 1 / 0.7)
    gx, gb = relu_dropout_backward_sum_cpu(gy, mask, 1 / 0.7)
    np.testing.assert_array_equal(gx, gx_ref)
    assert gb.dtype == np.float32 and gb.shape == (cols,)
    np.testing.assert_allclose(gb, gx_ref.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
    kept = gy.copy()
    same, gb_in_place = relu_dropout_backward_sum_cpu(kept, mask, 1 / 0.7, out=kept)  # the MLP's in-place use
    assert same is kept
    np.testing.assert_array_equal(kept, gx_ref)
    np.testing.assert_array_equal(gb_in_place, gb)


def test_the_bias_gradient_rounds_alike_on_any_thread_count(rng):
    # chunks of SUM_ROWS rows are summed in a fixed order, so the bits do not depend on how many threads ran them
    x, gy = _x(rng, (20 * SUM_ROWS + 7, 300)), _x(rng, (20 * SUM_ROWS + 7, 300)) * 1e3
    _, mask = relu_dropout_cpu(x, 0.0)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = relu_dropout_backward_sum_cpu(gy, mask, 1.0)[1]
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(one, relu_dropout_backward_sum_cpu(gy, mask, 1.0)[1])


def test_backward_sum_dispatches_on_each_backend(xp, rng):
    x, gy = _x(rng, (70, 50)), _x(rng, (70, 50))
    _, mask = relu_dropout_ref(x, 0.2, seed=1, step=1)
    gx, gb = relu_dropout_backward_sum(xp.asarray(gy), xp.asarray(mask), 1.25)
    gx_ref = relu_dropout_backward_ref(gy, mask, 1.25)
    np.testing.assert_array_equal(to_host(gx), gx_ref)
    np.testing.assert_allclose(to_host(gb), gx_ref.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_dispatch_on_each_backend(xp, rng):
    x, gy = _x(rng, (9, 50)), _x(rng, (9, 50))
    y, mask = relu_dropout(xp.asarray(x), 0.2, seed=1, step=1)
    y_ref, mask_ref = relu_dropout_ref(x, 0.2, seed=1, step=1)
    assert type(y) is type(xp.asarray(x))
    np.testing.assert_array_equal(to_host(mask), mask_ref)
    np.testing.assert_array_equal(to_host(y), y_ref)
    np.testing.assert_array_equal(to_host(relu_dropout_backward(xp.asarray(gy), mask, 1.25)),
                                  relu_dropout_backward_ref(gy, mask_ref, 1.25))


@pytest.mark.parametrize("p,training,relu", [(0.3, True, True), (0.0, True, True), (0.5, False, True),
                                             (0.4, True, False)])
def test_gradcheck(rng, p, training, relu):
    x = rng.standard_normal((5, 37))
    assert gradcheck(lambda t: ReLUDropout(p, seed=3, step=7, training=training, relu=relu).apply(t), x)


def test_function_keeps_only_the_packed_mask(rng):
    x = Tensor(_x(rng, (4, 64)), requires_grad=True)
    fn = ReLUDropout(0.5, seed=1, step=1)
    y = fn.apply(x)
    y.backward(np.ones(y.shape, dtype=np.float32))
    assert fn.mask.nbytes == 4 * 2 * 4
    np.testing.assert_array_equal(x.grad != 0, unpack_bits_ref(fn.mask, 64))


def test_bad_arguments_are_refused(rng):
    x = _x(rng, (2, 40))
    with pytest.raises(ValueError, match=r"p=1.0 must lie in \[0, 1\)"):
        relu_dropout(x, 1.0)
    with pytest.raises(ValueError, match="cannot hold 40 columns"):
        relu_dropout(x, 0.1, words_per_row=1)
    with pytest.raises(ValueError, match="mask of shape"):
        relu_dropout_backward(x, pack_bits_ref(x[:1] > 0), 1.0)


@pytest.mark.cudasim
@pytest.mark.parametrize("shape", [(1, 1), (3, 33), (2, 70)])
def test_cuda_kernels_match_reference(rng, shape):
    x, gy, bias = _x(rng, shape), _x(rng, shape), _x(rng, shape[1:])
    for kw in (dict(p=0.3, seed=5, step=2), dict(p=0.0), dict(p=0.4, relu=False, bias=bias, words_per_row=4),
               dict(p=0.3, seed=5, step=2, row0=7)):
        y, mask = relu_dropout_cuda(x, **kw)
        y_ref, mask_ref = relu_dropout_ref(x, **kw)
        np.testing.assert_array_equal(mask, mask_ref)
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(relu_dropout_backward_cuda(gy, mask, 1.5),
                                      relu_dropout_backward_ref(gy, mask_ref, 1.5))


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
def test_cuda_kernels_on_real_shapes(rng):
    x, gy = _x(rng, (4096, 1000)), _x(rng, (4096, 1000))
    y, mask = relu_dropout_cuda(to_device(x), 0.5, seed=77, step=123)
    y_ref, mask_ref = relu_dropout_cpu(x, 0.5, seed=77, step=123)
    np.testing.assert_array_equal(to_host(mask), mask_ref)  # the same draw on both devices
    np.testing.assert_array_equal(to_host(y), y_ref)
    np.testing.assert_array_equal(to_host(relu_dropout_backward_cuda(to_device(gy), mask, 2.0)),
                                  relu_dropout_backward_cpu(gy, mask_ref, 2.0))
