"""Row formats: fp32 exact, fp16 NumPy's rounding, int8 within half a step of each row's own range."""
import numpy as np
import pytest

from gpuemb.serve.rows import FORMATS, check_format, decode, encode


@pytest.fixture
def weights():
    rng = np.random.default_rng()
    w = rng.normal(0, rng.uniform(0.01, 2, (300, 1)), (300, 16)).astype(np.float32)
    w[7] = 0.25  # a constant row: scale 0, read back exactly
    return w


def test_fp32_and_fp16(weights):
    assert np.array_equal(decode(encode(weights, "fp32"), "fp32"), weights)
    assert np.array_equal(decode(encode(weights, "fp16"), "fp16"), weights.astype(np.float16).astype(np.float32))


def test_int8_is_the_min_max_affine_of_each_row(weights):
    parts = encode(weights, "int8")
    low, high = weights.min(1), weights.max(1)
    np.testing.assert_array_equal(parts["bias"], low)
    np.testing.assert_allclose(parts["scale"], (high - low) / 255, rtol=1e-6)
    assert parts["codes"].dtype == np.uint8 and parts["codes"].min() == 0
    assert (parts["codes"].max(1)[parts["scale"] > 0] == 255).all()  # every row spans its 256 levels
    back = decode(parts, "int8")
    err = np.abs(back - weights)
    assert (err <= parts["scale"][:, None] / 2 + 1e-6 * np.abs(weights).max()).all(), err.max()
    assert np.array_equal(back[7], weights[7])


def test_empty_tables_and_unknown_formats():
    for rows in FORMATS:
        assert decode(encode(np.zeros((0, 4), np.float32), rows), rows).shape == (0, 4)
    with pytest.raises(ValueError, match="use one of fp32, fp16, int8"):
        check_format("int4")
