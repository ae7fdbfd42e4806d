"""The emulated device's nvmath against NumPy: the arithmetic of each compute type, each epilogue used by the fused
MLP with its bit layouts, the layouts of results, the stateful Matmul and what nvmath refuses.

It runs on any device: the stand-in works on its own device arrays, made here with ``wrap``.
"""
import numpy as np
import pytest

from gpuemb.autograd.emulated import nvmath
from gpuemb.autograd.emulated.array import wrap

Epilog = nvmath.MatmulEpilog


def dev(a):
    """A device array over ``a`` itself, its strides kept."""
    return wrap(np.asarray(a))


def layouts(a):
    """``a`` in each layout cuBLASLt reads: row-major, column-major, and row-major with padded rows."""
    padded = np.zeros((a.shape[0], a.shape[1] + 3), dtype=a.dtype)
    padded[:, :a.shape[1]] = a
    return {"row": np.ascontiguousarray(a), "col": np.asfortranarray(a), "padded": padded[:, :a.shape[1]]}


def bit(aux, m, n):
    """Bit m of column n of a ReLU bitmask: bit m % 8 of byte m // 8 (cuBLASLt's layout, which mlp.py reads)."""
    return (int(aux[m // 8, n]) >> (m % 8)) & 1


@pytest.mark.parametrize("a_layout", ["row", "col", "padded"])
@pytest.mark.parametrize("b_layout", ["row", "col", "padded"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_in_every_layout_matches_numpy(rng, a_layout, b_layout, dtype):
    a, b = rng.standard_normal((7, 9)).astype(dtype), rng.standard_normal((9, 5)).astype(dtype)
    d = nvmath.matmul(dev(layouts(a)[a_layout]), dev(layouts(b)[b_layout]), alpha=0.5)
    np.testing.assert_allclose(d.get(), 0.5 * (a @ b), rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert d.dtype == dtype
    # without an epilog that needs column-major, the result is laid out as A is
    assert d.flags.f_contiguous == (a_layout == "col") and d.flags.c_contiguous == (a_layout != "col")


def test_float16_accumulates_in_float32_and_rounds_once(rng):
    a, b = rng.standard_normal((16, 512)).astype(np.float16), rng.standard_normal((512, 24)).astype(np.float16)
    d = nvmath.matmul(dev(a), dev(b), options={"compute_type": nvmath.ComputeType.COMPUTE_32F})
    assert d.dtype == np.float16
    np.testing.assert_array_equal(d.get(), (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16))


def test_fast_16bf_rounds_operands_to_bfloat16_and_accumulates_in_float32(rng):
    torch = pytest.importorskip("torch", reason="torch's bfloat16 is the reference for the rounding")
    a, b = rng.standard_normal((16, 300)).astype(np.float32), rng.standard_normal((300, 24)).astype(np.float32)
    options = nvmath.MatmulOptions(compute_type=nvmath.ComputeType.COMPUTE_32F_FAST_16BF)
    d = nvmath.matmul(dev(a), dev(b), options=options).get()
    bf = [torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy() for x in (a, b)]
    assert d.dtype == np.float32
    np.testing.assert_allclose(d, bf[0] @ bf[1], rtol=1e-6, atol=1e-5)
    assert np.abs(d - a @ b).max() > 1e-3  # the rounding happened


def _round_to_bits(x, bits):
    """float32 values rounded to ``bits`` significant bits, to nearest even, computed in float64 (normal numbers)."""
    m, e = np.frexp(x.astype(np.float64))
    return (np.round(m * 2.0 ** bits) / 2.0 ** bits * 2.0 ** e).astype(np.float32)


def test_tf32_keeps_eleven_significant_bits_to_nearest_even(rng):
    x = np.concatenate([rng.standard_normal(10_000).astype(np.float32) * 100,
                        np.uint32([0x3F801000, 0x3F803000, 0x3F800FFF]).view(np.float32)])  # ties and below one
    np.testing.assert_array_equal(nvmath.tfloat32(x), _round_to_bits(x, 11))
    assert nvmath.tfloat32(np.float32([1 + 2 ** -11]))[0] == 1.0  # a tie goes to the even neighbour


@pytest.mark.parametrize("compute,rounding", [("COMPUTE_32F_FAST_TF32", "tfloat32"), ("COMPUTE_32F_FAST_16F", "half")])
def test_fast_compute_types_round_float32_operands_and_accumulate_in_float32(rng, compute, rounding):
    a, b = rng.standard_normal((16, 300)).astype(np.float32), rng.standard_normal((300, 24)).astype(np.float32)
    options = nvmath.MatmulOptions(compute_type=getattr(nvmath.ComputeType, compute))
    d = nvmath.matmul(dev(a), dev(b), options=options).get()
    ra, rb = (getattr(nvmath, rounding)(x).astype(np.float64) for x in (a, b))
    assert d.dtype == np.float32
    np.testing.assert_allclose(d, ra @ rb, rtol=1e-5, atol=1e-4)
    assert np.abs(d - a.astype(np.float64) @ b).max() > 1e-4  # the rounding happened
    if rounding == "half":
        np.testing.assert_array_equal(nvmath.half(np.float32([1e5, 1 + 2 ** -11])), [np.inf, 1.0])


def test_bfloat16_rounds_to_nearest_even_like_torch():
    torch = pytest.importorskip("torch", reason="torch's bfloat16 is the reference for the rounding")
    ties = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x7F7FFFFF, 0xBF808001], dtype=np.uint32).view(np.float32)
    x = np.concatenate([ties, np.float32([np.inf, -np.inf, 0.0, -0.0, 1e-40, 3.14159, -2.71828])])
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(nvmath.bfloat16(x), want)
    assert np.isnan(nvmath.bfloat16(np.float32([np.nan]))).all()


@pytest.mark.parametrize("epilog", ["BIAS", "RELU_BIAS", "RELU_AUX_BIAS", "RELU", "RELU_AUX"])
@pytest.mark.parametrize("M", [5, 130])
def test_forward_epilogues_match_numpy(rng, epilog, M):
    a, b = rng.standard_normal((M, 11)).astype(np.float32), rng.standard_normal((11, 6)).astype(np.float32).T.copy().T
    bias = rng.standard_normal(M).astype(np.float32)
    inputs = {"bias": dev(bias)} if "BIAS" in epilog else None
    out = nvmath.matmul(dev(a), dev(b), alpha=1.5, epilog=Epilog[epilog], epilog_inputs=inputs)
    d, aux = out if "AUX" in epilog else (out, {})
    z = 1.5 * (a @ b) + (bias[:, None] if inputs else 0)
    np.testing.assert_allclose(d.get(), np.maximum(z, 0) if "RELU" in epilog else z, rtol=1e-5, atol=1e-5)
    assert d.flags.f_contiguous == (epilog != "RELU")  # every epilog with an input or output is column-major
    if "AUX" in epilog:
        assert aux["relu_aux"].flags.f_contiguous
        mask = aux["relu_aux"].get()
        assert mask.dtype == np.uint8 and mask.shape == (16 * ((M + 127) // 128), 6)
        got = np.array([[bit(mask, m, n) for n in range(6)] for m in range(8 * mask.shape[0])])
        np.testing.assert_array_equal(got[:M], z > 0)
        assert got[M:].all()  # padding bits set: nothing may count on them


def test_drelu_bgrad_masks_scales_and_sums_along_n(rng):
    M, K, N = 130, 9, 7
    a, b = rng.standard_normal((K, M)).astype(np.float32).T, rng.standard_normal((N, K)).astype(np.float32).T
    aux = np.asfortranarray(rng.integers(0, 256, (32, N), dtype=np.uint8))
    d, out = nvmath.matmul(dev(a), dev(b), alpha=2.0, epilog=Epilog.DRELU_BGRAD, epilog_inputs={"relu_aux": dev(aux)})
    bits = np.array([[bit(aux, m, n) for n in range(N)] for m in range(M)], dtype=bool)
    want = np.where(bits, 2.0 * (a @ b), 0)
    np.testing.assert_allclose(d.get(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["drelu_bgrad"].get(), want.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert out["drelu_bgrad"].shape == (M,) and d.flags.f_contiguous


@pytest.mark.parametrize("epilog", ["BGRADA", "BGRADB"])
def test_bias_gradients_of_the_operands(rng, epilog):
    a, b = rng.standard_normal((6, 20)).astype(np.float16), rng.standard_normal((20, 9)).astype(np.float16)
    d, out = nvmath.matmul(dev(a), dev(b), epilog=Epilog[epilog])
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    want = a32.sum(axis=1) if epilog == "BGRADA" else b32.sum(axis=0)
    got = out[epilog.lower()].get()
    assert got.dtype == np.float16 and d.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))
    np.testing.assert_array_equal(d.get(), (a32 @ b32).astype(np.float16))


def test_c_and_beta_broadcast_along_n(rng):
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (4, 1)))
    d = nvmath.matmul(dev(a), dev(b), dev(np.asfortranarray(c)), alpha=2.0, beta=-1.0)
    np.testing.assert_allclose(d.get(), 2 * (a @ b) - c, rtol=1e-5, atol=1e-6)
    assert d.flags.f_contiguous  # C's order


def test_a_planned_matmul_runs_again_on_reset_operands(rng):
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((5, 4), (4, 3), (5,)))
    with nvmath.Matmul(dev(a), dev(b), alpha=1.0) as mm:
        assert len(mm.plan(epilog=Epilog.BIAS, epilog_inputs={"bias": dev(bias)})) >= 1
        np.testing.assert_allclose(mm.execute().get(), a @ b + bias[:, None], rtol=1e-5, atol=1e-6)
        a2, b2, bias2 = (rng.standard_normal(x.shape).astype(np.float32) for x in (a, b, bias))
        mm.reset_operands(a=dev(a2), b=dev(b2), alpha=3.0, epilog_inputs={"bias": dev(bias2)})
        np.testing.assert_allclose(mm.execute().get(), 3 * (a2 @ b2) + bias2[:, None], rtol=1e-5, atol=1e-5)
        with pytest.raises(TypeError):
            mm.reset_operands(dev(a), dev(b))  # nvmath 0.9 made the operands keyword-only
        with pytest.raises(ValueError, match="at least one operand"):
            mm.reset_operands()  # nvmath 1.0 refuses this; release_operands drops them
        mm.release_operands()
        with pytest.raises(RuntimeError, match="after release_operands"):
            mm.execute()
        with pytest.raises(ValueError, match="all required operands"):
            mm.reset_operands(a=dev(a), b=dev(b))  # the bias is missing
        with pytest.raises(ValueError, match="strides"):
            mm.reset_operands(a=dev(np.asfortranarray(a)), b=dev(b), epilog_inputs={"bias": dev(bias)})
    with pytest.raises(nvmath.InvalidMatmulState):
        mm.execute()
    with pytest.raises(RuntimeError, match="before plan"):
        nvmath.Matmul(dev(a), dev(b)).execute()


def _refusal_cases(rng):
    f32 = lambda *s: dev(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    aux = np.zeros((32, 4), dtype=np.uint8, order="F")
    drelu = dict(epilog=Epilog.DRELU_BGRAD)
    return {
        "dtypes": ((f32(3, 2), dev(np.ones((2, 4), np.float16))), {}, ValueError, "combination of dtypes"),
        "compute type": ((f32(3, 2), f32(2, 4)), dict(options={"compute_type": nvmath.ComputeType.COMPUTE_16F}),
                         NotImplementedError, "COMPUTE_16F"),
        "fast bf16 on float16": ((dev(np.ones((3, 2), np.float16)), dev(np.ones((2, 4), np.float16))),
                                 dict(options={"compute_type": 75}), ValueError, "not supported for data types"),
        "empty": ((f32(0, 2), f32(2, 4)), {}, ValueError, "strictly positive"),
        "K": ((f32(3, 2), f32(3, 4)), {}, ValueError, "K=2"),
        "layout": ((dev(np.ones((6, 8), np.float32)[::2, ::2]), f32(4, 4)), {}, ValueError, "unsupported layout"),
        "host operand": ((np.ones((3, 2), np.float32), f32(2, 4)), {}, TypeError, "host array"),
        "bias missing": ((f32(3, 2), f32(2, 4)), dict(epilog=Epilog.BIAS), ValueError, "requires the input"),
        "bias shape": ((f32(3, 2), f32(2, 4)), dict(epilog=Epilog.BIAS, epilog_inputs={"bias": f32(4)}),
                       ValueError, "M dimension"),
        "bias stride": ((f32(3, 2), f32(2, 4)), dict(epilog=Epilog.BIAS, epilog_inputs={"bias": f32(6)[::2]}),
                        ValueError, "unit stride"),
        "bias dtype": ((f32(3, 2), f32(2, 4)), dict(epilog=Epilog.BIAS, epilog_inputs={"bias": dev(np.ones(3))}),
                       ValueError, "float64"),
        "aux dtype": ((f32(130, 2), f32(2, 4)), dict(drelu, epilog_inputs={"relu_aux": dev(aux.view(np.int8))}),
                      ValueError, "uint8"),
        "aux shape": ((f32(3, 2), f32(2, 4)), dict(drelu, epilog_inputs={"relu_aux": dev(aux)}), ValueError,
                      r"\(16, 4\)"),
        "aux row-major": ((f32(130, 2), f32(2, 4)),
                          dict(drelu, epilog_inputs={"relu_aux": dev(np.ascontiguousarray(aux))}), ValueError,
                          "column-major"),
        "aux ld": ((f32(130, 2), f32(2, 4)),
                   dict(drelu, epilog_inputs={"relu_aux": dev(np.zeros((40, 4), np.uint8, order="F")[:32])}),
                   ValueError, "32 bytes apart"),
        "drelu K=1": ((f32(130, 1), f32(1, 4)), dict(drelu, epilog_inputs={"relu_aux": dev(aux)}), ValueError,
                      "K=1"),
        "gelu": ((f32(3, 2), f32(2, 4)), dict(epilog=Epilog.GELU), NotImplementedError, "GELU"),
    }


@pytest.mark.parametrize("case", list(_refusal_cases(np.random.default_rng(0))))
def test_what_nvmath_refuses_is_refused(rng, case):
    operands, kwargs, error, match = _refusal_cases(rng)[case]
    with pytest.raises(error, match=match):
        nvmath.matmul(*operands, **kwargs)


def test_options_take_a_dataclass_or_a_dict_and_check_the_compute_type():
    assert nvmath.MatmulOptions(compute_type=68).compute_type is nvmath.ComputeType.COMPUTE_32F
    assert nvmath.MatmulComputeType is nvmath.ComputeType
    with pytest.raises(ValueError):
        nvmath.MatmulOptions(compute_type=12345)
    with pytest.raises(TypeError):
        nvmath.Matmul(dev(np.ones((2, 2), np.float32)), dev(np.ones((2, 2), np.float32)), options=[1])


def test_a_batch_of_matrices_multiplies_each_pair(rng):
    z = rng.standard_normal((5, 7, 3)).astype(np.float32)
    d = nvmath.matmul(dev(z), dev(z).transpose(0, 2, 1))  # each Z_b @ Z_bᵀ: B read column-major, as a view
    np.testing.assert_allclose(d.get(), z @ z.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    assert d.shape == (5, 7, 7) and d.strides[-1] == 4  # each matrix laid out as A's
    options = nvmath.MatmulOptions(compute_type=nvmath.ComputeType.COMPUTE_32F_FAST_TF32)
    g = rng.standard_normal((5, 7, 7)).astype(np.float32)
    d = nvmath.matmul(dev(g), dev(z), options=options).get()
    np.testing.assert_allclose(d, nvmath.tfloat32(g).astype(np.float64) @ nvmath.tfloat32(z), rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="batches of one size"):
        nvmath.matmul(dev(z), dev(z[0].T))
    with pytest.raises(NotImplementedError, match="epilogs on batched operands"):
        nvmath.matmul(dev(z), dev(z).transpose(0, 2, 1), epilog=Epilog.RELU)
