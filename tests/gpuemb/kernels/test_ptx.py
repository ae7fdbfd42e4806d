"""Every numba.cuda kernel, compiled to PTX for sm_90 by the real compiler, with the argument types that its call
sites pass.

The cudasim pass runs the kernels in numba's simulator, which accepts code that the compiler refuses (a shared
array shaped by an expression, say). ``compile_ptx`` needs no GPU: only numba-cuda's NVVM (libnvvm, libnvrtc for
the architectures it supports, libcudart at import), which the ``ptx`` extra installs from PyPI. Where they are
missing, the compile tests skip and say why, except under ``GPUEMB_REQUIRE_PTX=1`` (the PTX pass of .ci/run),
where they fail. Arrays are C-contiguous, as the call sites make them: a layout changes the index arithmetic, not
what compiles.
"""
import importlib
import os
import pkgutil
import types

import numpy as np
import pytest

from gpuemb.autograd import launch

pytestmark = pytest.mark.ptx

CC = (9, 0)  # H100 and H200
KERNEL_PACKAGES = ("gpuemb.kernels", "gpuemb.store", "gpuemb.optim", "gpuemb.io")  # every module holding a kernel


def _each(template, *dtypes):
    return [template.format(t=t) for t in dtypes]


# One entry per KERNELS name, each the signatures its call sites produce: float16 where fp16 precision or a
# float16 table reaches the kernel, float64 where a float64 table does (store.options.DTYPES); Python ints are
# int64, Python bools boolean, Python floats float64.
SIGNATURES = {
    "gpuemb.kernels.codecs._bf16_encode_kernel": ["void(uint32[::1], uint16[::1])"],
    "gpuemb.kernels.codecs._bf16_decode_kernel": ["void(uint16[::1], uint32[::1])"],
    "gpuemb.kernels.codecs._int8_encode_kernel": ["void(float32[:, ::1], int8[:, ::1], float32[::1])"],
    "gpuemb.kernels.codecs._int8_decode_kernel": ["void(int8[::1], float32[::1], int64, float32[::1])"],
    "gpuemb.kernels.cross._combine_kernel": [
        "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], boolean, float32[:, ::1])"],
    "gpuemb.kernels.cross._combine_backward_kernel": [
        "void(float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[::1], boolean, float32[:, ::1], "
        "float32[:, ::1])"],
    "gpuemb.kernels.dot_interaction.forward[float32]": [
        "void(float32[:, ::1], float32[:, :, ::1], float32[:, ::1], int64)"],
    "gpuemb.kernels.dot_interaction.forward[float16]": [
        "void(float16[:, ::1], float16[:, :, ::1], float16[:, ::1], int64)"],
    "gpuemb.kernels.dot_interaction.backward[float32]": [
        "void(float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32[:, ::1], float32[:, :, ::1], int64)"],
    "gpuemb.kernels.dot_interaction.backward[float16]": [
        "void(float16[:, ::1], float16[:, ::1], float16[:, :, ::1], float16[:, ::1], float16[:, :, ::1], int64)"],
    "gpuemb.kernels.embedding_bag._segment_rows_kernel": _each(
        "void({t}[:, ::1], int64[::1], {t}[::1], int64[::1], int32[:, ::1], int64[::1], boolean, {t}, {t}[:, ::1])",
        "float32", "float64"),
    "gpuemb.kernels.embedding_bag._segment_max_kernel": _each(
        "void({t}[:, ::1], int64[::1], int64[::1], {t}, {t}[:, ::1], int32[:, ::1])", "float32", "float64"),
    "gpuemb.kernels.embedding_bag._row_dots_kernel": _each(
        "void({t}[:, ::1], int64[::1], int64[::1], {t}[:, ::1], {t}, {t}[::1])", "float32", "float64"),
    "gpuemb.kernels.fm._fm_kernel": ["void(float32[:, :, ::1], float32, float32[:, ::1])"],
    "gpuemb.kernels.fm._fm_backward_kernel": ["void(float32[:, ::1], float32[:, :, ::1], float32, float32[:, :, ::1])"],
    # weights by embedding_bag, stored rows as unsigned bits by the tiers (numba's CPU target has no float16)
    "gpuemb.store.init._draw_kernel": _each("void(uint64[::1], int64, int64, float64, uint64, uint64, {t}[:, ::1])",
                                            "float32", "float64"),
    "gpuemb.store.mixing._mix_kernel": ["void(uint64[::1], int32[::1], boolean, uint64[::1])"],
    "gpuemb.kernels.gather._gather_rows_kernel": _each(
        "void({t}[:, ::1], int64[::1], {t}[:, ::1])", "float32", "float64", "uint16", "uint32", "uint64"),
    "gpuemb.kernels.gather._scatter_rows_kernel": _each(  # the tiers' writes, as unsigned bits
        "void({t}[:, ::1], int64[::1], {t}[:, ::1])", "uint16", "uint32", "uint64"),
    "gpuemb.kernels.relu_dropout._relu_dropout_kernel": _each(
        "void({t}[:, ::1], {t}[:, ::1], uint32[:, ::1], {t}[::1], uint64, uint64, uint64, uint64, uint64, {t}, "
        "int64, boolean)", "float32", "float16"),
    "gpuemb.kernels.relu_dropout._relu_dropout_backward_kernel": _each(
        "void({t}[:, ::1], uint32[:, ::1], {t}, {t}[:, ::1])", "float32", "float16"),
    "gpuemb.store.key_index_kernels._lookup_kernel": [
        "void(int64[::1], int32[::1], int64[::1], boolean, int64[::1])"],
    "gpuemb.store.key_index_kernels._claim_kernel": [
        "void(int64[::1], int32[::1], int64[::1], int64[::1], int64[::1])"],
    "gpuemb.store.key_index_kernels._mark_new_kernel": ["void(int32[::1], int64[::1], boolean[::1])"],
    "gpuemb.store.key_index_kernels._assign_kernel": ["void(int32[::1], int64[::1], int64[::1], boolean[::1])"],
    "gpuemb.store.key_index_kernels._rehash_kernel": ["void(int64[::1], int32[::1], int64[::1], int32[::1])"],
    # stochastic float16 rounding of the weight columns of float32 working rows (store.rounding): column slices
    "gpuemb.store.rounding._round_kernel": _each(
        "void(uint32[:, :], uint64[::1], {t}[::1], uint64, uint64, int64, int64, int64, uint16[:, :])", "int32",
        "int64"),
    # float16 tables update float32 working rows (store.row_format)
    "gpuemb.optim.rowwise_kernels._begin_rows_kernel": _each(
        "void({t}[:, ::1], int32[::1], boolean, int64[::1], {t}[:, ::1], int64, float64[::1])", "float32", "float64"),
    "gpuemb.optim.rowwise_kernels._update_elements_kernel": _each(
        "void({t}[:, ::1], int32[::1], boolean, int64[::1], {t}[:, ::1], int64, float64[::1], float64)",
        "float32", "float64"),
}


def _registered_kernels():
    """launch.KERNELS once every module that defines a kernel is imported, the lazy per-dtype ones built."""
    for name in KERNEL_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)
    from gpuemb.kernels.dot_interaction import _cuda_kernels
    for dtype in (np.float32, np.float16):
        _cuda_kernels(dtype)
    return launch.KERNELS


def _why_no_compiler():
    """Why numba-cuda cannot compile PTX in this process, or None when it can."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1: the simulator has no compiler; run `pytest -m ptx` without it"
    from numba import cuda

    def empty(a):
        pass

    try:
        cuda.compile_ptx(empty, "void(int32[::1])", cc=CC)
    except Exception as e:  # a missing library shows as ImportError, OSError or cuda.pathfinder's own error
        return (f"numba-cuda cannot compile PTX here ({type(e).__name__}: {str(e).splitlines()[0]}); "
                "install the ptx extra: pip install -e '.[ptx]'")
    return None


@pytest.fixture(scope="module")
def compiler():
    why = _why_no_compiler()
    if why and os.environ.get("GPUEMB_REQUIRE_PTX") == "1":
        pytest.fail(f"GPUEMB_REQUIRE_PTX=1, but {why}")
    if why:
        pytest.skip(why)
    from numba import cuda
    return cuda.compile_ptx


def test_every_registered_kernel_has_a_signature():
    missing = sorted(set(_registered_kernels()) - set(SIGNATURES))
    assert not missing, f"kernels without argument types in SIGNATURES, so never compiled here: {missing}"


def test_every_signature_names_a_registered_kernel():
    stale = sorted(set(SIGNATURES) - set(_registered_kernels()))
    assert not stale, f"SIGNATURES names kernels that no longer exist (renamed or removed?): {stale}"


def _case(name, signature):
    """A parameter named by the kernel and its first argument's type, which tells a kernel's signatures apart."""
    return pytest.param(name, signature, id=f"{name.removeprefix('gpuemb.')}:{signature[5:].split('[')[0]}")


@pytest.mark.parametrize("name,signature", [_case(n, s) for n, sigs in SIGNATURES.items() for s in sigs])
def test_kernel_compiles_to_ptx(compiler, monkeypatch, name, signature):
    kernels = _registered_kernels()
    if name not in kernels:
        pytest.fail(f"{name} is in SIGNATURES but is no registered kernel")
    # numba-cuda compiles a called device function for the current device's compute capability, which asks the
    # driver: with no GPU, that device is an sm_90 stand-in. (The device function keeps that sm_90 overload.)
    from numba.cuda import dispatcher
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: types.SimpleNamespace(compute_capability=CC))
    ptx, result = compiler(kernels[name].py_func, signature, cc=CC)
    assert str(result) == "none"
    assert ".target sm_90" in ptx and ".entry" in ptx
