import numpy as np
import pytest

from gpuemb.autograd.backend import to_device, to_host
from gpuemb.kernels.codecs import (
    CODECS, bf16_decode, bf16_decode_cpu, bf16_decode_cuda, bf16_decode_ref, bf16_encode, bf16_encode_cpu,
    bf16_encode_cuda, bf16_encode_ref, decode, encode, int8_decode, int8_decode_cpu, int8_decode_cuda,
    int8_decode_ref, int8_encode, int8_encode_cpu, int8_encode_cuda, int8_encode_ref)

SHAPES = [(1, 1), (7, 33), (100, 128), (3, 1000)]  # rows, D: a single value, D not a multiple of 32


def _rows(rng, N, D):
    """Rows whose magnitudes span several orders, so a shared scale would fail where a per-row one does not."""
    return (rng.standard_normal((N, D)) * 10.0 ** rng.uniform(-3, 3, (N, 1))).astype(np.float32)


def test_bf16_rounds_to_nearest_even_by_hand():
    one_ulp = 2.0 ** -7  # bf16 keeps 7 mantissa bits
    x = np.array([1.0, 1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 1 + one_ulp * 0.51, -2.0,
                  np.finfo(np.float32).max, np.inf, np.nan], dtype=np.float32)
    bits = bf16_encode_ref(x)
    np.testing.assert_array_equal(bits[:7], [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC000, 0x7F80, 0x7F80])
    assert np.isnan(bf16_decode_ref(bits[7:])).all()


@pytest.mark.parametrize("N,D", SHAPES)
def test_bf16_cpu_matches_reference(rng, N, D):
    x = _rows(rng, N, D)
    x.reshape(-1)[: min(x.size, 3)] = [np.nan, -np.inf, 3.0e38][: min(x.size, 3)]
    bits = bf16_encode_cpu(x)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bits, bf16_encode_ref(x))
    np.testing.assert_array_equal(bf16_decode_cpu(bits), bf16_decode_ref(bits))


def test_bf16_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x = _rows(rng, 64, 77)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bf16_encode(x), want)


@pytest.mark.parametrize("codec,rel", [("bf16", 2.0 ** -8), ("fp16", 2.0 ** -11), ("fp32", 0.0)])
def test_float_round_trip_relative_error(rng, codec, rel):
    x = (rng.choice([-1, 1], (50, 40)) * 10.0 ** rng.uniform(-2, 2, (50, 40))).astype(np.float32)  # fp16 normals
    back = decode(encode(x, codec), codec)
    assert back.dtype == np.float32
    assert np.all(np.abs(back - x) <= rel * np.abs(x))
    assert codec == "fp32" or np.any(back != x)  # the codec did round something


@pytest.mark.parametrize("N,D", SHAPES)
def test_int8_cpu_matches_reference(rng, N, D):
    x = _rows(rng, N, D)
    q, scale = int8_encode_cpu(x)
    want_q, want_scale = int8_encode_ref(x)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(scale, want_scale)
    np.testing.assert_array_equal(int8_decode_cpu(q, scale), int8_decode_ref(q, scale))


@pytest.mark.parametrize("N,D", SHAPES)
def test_int8_round_trip_error_is_half_a_step(rng, N, D):
    x = _rows(rng, N, D)
    back = decode(encode(x, "int8"), "int8")
    absmax = np.abs(x).max(axis=1, keepdims=True)
    assert np.all(np.abs(back - x) <= absmax / 254 * (1 + 1e-5) + 1e-30)
    assert np.all(np.abs(int8_encode(x)[0]).max(axis=1) == 127)  # each row uses the full range


def test_int8_zero_row_round_trips_to_zeros(rng):
    x = _rows(rng, 3, 16)
    x[1] = 0
    q, scale = int8_encode(x)
    back = int8_decode(q, scale)
    assert scale[1] == 0 and not np.isnan(back).any()
    np.testing.assert_array_equal(back[1], 0)
    assert np.all(back[[0, 2]] != 0)


def test_bad_codec_and_dtype_are_refused(rng):
    with pytest.raises(ValueError, match="unknown codec 'int4'"):
        encode(_rows(rng, 2, 2), "int4")
    with pytest.raises(TypeError, match="float32"):
        int8_encode(np.ones((2, 2)))
    with pytest.raises(TypeError, match="uint16"):
        bf16_decode(np.ones(3, np.int16))


@pytest.mark.parametrize("codec", CODECS)
def test_dispatch_on_each_backend(xp, rng, codec):
    x = _rows(rng, 9, 40)
    parts = encode(xp.asarray(x), codec)
    assert all(type(p) is type(xp.asarray(x)) for p in parts)
    want = decode(tuple(to_host(p) for p in encode(x, codec)), codec)
    np.testing.assert_array_equal(to_host(decode(parts, codec)), want)


@pytest.mark.cudasim
@pytest.mark.parametrize("N,D", [(0, 5), (1, 1), (3, 37), (2, 300)])  # no rows; D > a block's 128 threads
def test_cuda_kernels_match_reference(rng, N, D):
    x = _rows(rng, N, D)
    q, scale = int8_encode_cuda(x)
    want_q, want_scale = int8_encode_ref(x)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(scale, want_scale)
    np.testing.assert_array_equal(int8_decode_cuda(q, scale), int8_decode_ref(q, scale))
    bits = bf16_encode_cuda(x)
    np.testing.assert_array_equal(bits, bf16_encode_ref(x))
    np.testing.assert_array_equal(bf16_decode_cuda(bits), bf16_decode_ref(bits))


@pytest.mark.gpu
@pytest.mark.real_gpu  # shapes the simulator would take many minutes over
def test_cuda_kernels_on_real_shapes(rng):
    x = _rows(rng, 65536, 128)
    q, scale = int8_encode_cuda(to_device(x))
    want_q, want_scale = int8_encode_ref(x)
    assert np.abs(to_host(q).astype(np.int16) - want_q).max() <= 1  # llrint and np.rint agree except at ties
    np.testing.assert_array_equal(to_host(scale), want_scale)
    back = to_host(int8_decode_cuda(q, scale))
    assert np.all(np.abs(back - x) <= np.abs(x).max(axis=1, keepdims=True) / 254 * (1 + 1e-5))
    bits = bf16_encode_cuda(to_device(x))
    np.testing.assert_array_equal(to_host(bits), bf16_encode_ref(x))
    np.testing.assert_array_equal(to_host(bf16_decode_cuda(bits)), bf16_decode_ref(bf16_encode_ref(x)))
