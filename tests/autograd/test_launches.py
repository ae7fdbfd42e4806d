"""The counts of launches and reads back (autograd/launches.py): phases, nesting, threads, and the backward's phase
following each Function's forward. Counted here by hand, so they run on every device; what the emulated device
counts of itself is in tests/autograd/emulated/test_counts.py."""
import threading
import time

import numpy as np
import pytest
from numba.core import types

from gpuemb.autograd import Function, Tensor, launches


def mine():
    return launches.COUNTS.snapshot(this_thread=True)


def test_a_count_lands_in_the_innermost_phase_and_other_outside_them():
    before = mine()
    launches.cupy()
    with launches.phase("lookup"):
        launches.numba()
        with launches.phase("mlp_forward"):
            launches.cublaslt()
            launches.readback(2)
        launches.cupy()
    got = launches.COUNTS.since(before, this_thread=True)
    assert got == {"numba": 1, "cupy": 2, "cublaslt": 1, "readbacks": 2, "by_phase": {
        "lookup": {"numba": 1, "cupy": 1, "cublaslt": 0, "readbacks": 0},
        "mlp_forward": {"numba": 0, "cupy": 0, "cublaslt": 1, "readbacks": 2},
        "other": {"numba": 0, "cupy": 1, "cublaslt": 0, "readbacks": 0}}}
    assert launches.current_phase() == "other"


def test_a_phase_ends_with_its_block_even_on_an_error():
    with pytest.raises(KeyError):
        with launches.phase("loss"):
            raise KeyError("x")
    assert launches.current_phase() == "other"


def test_an_unknown_phase_names_the_known_ones():
    with pytest.raises(ValueError, match="not one of upload, lookup"):
        launches.phase("lokup")


def test_each_thread_has_its_own_phase_and_counts():
    before, all_before = mine(), launches.COUNTS.snapshot()
    seen = {}

    def other_thread():
        seen["phase"] = launches.current_phase()  # a new thread starts outside every phase
        with launches.phase("prefetch"):
            for _ in range(3):
                launches.numba()

    with launches.phase("lookup"):
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        launches.cupy()
    assert seen["phase"] == "other"
    assert launches.COUNTS.since(before, this_thread=True)["by_phase"] == {
        "lookup": {"numba": 0, "cupy": 1, "cublaslt": 0, "readbacks": 0}}
    every = launches.COUNTS.since(all_before)
    assert every["by_phase"]["prefetch"]["numba"] == 3 and every["numba"] >= 3 and every["cupy"] >= 1


def test_reports_add_up_and_average_per_step():
    a = {"numba": 2, "cupy": 3, "cublaslt": 0, "readbacks": 1, "by_phase": {
        "lookup": {"numba": 2, "cupy": 1, "cublaslt": 0, "readbacks": 0},
        "loss": {"numba": 0, "cupy": 2, "cublaslt": 0, "readbacks": 1}}}
    b = {"numba": 1, "cupy": 0, "cublaslt": 0, "readbacks": 0, "by_phase": {
        "lookup": {"numba": 1, "cupy": 0, "cublaslt": 0, "readbacks": 0}}}
    total = launches.added(a, b)
    assert total["numba"] == 3 and total["by_phase"]["lookup"]["numba"] == 3 and total["by_phase"]["loss"]["cupy"] == 2
    mean = launches.per_step(total, 2)
    assert mean["numba"] == 1.5 and mean["by_phase"]["loss"] == {"numba": 0, "cupy": 1, "cublaslt": 0,
                                                                 "readbacks": 0.5}
    assert launches.per_step(launches.added(), 0) == {"numba": 0, "cupy": 0, "cublaslt": 0, "readbacks": 0,
                                                      "by_phase": {}}


class Counted(Function):
    """y = 2x, counting one CuPy call in its forward and one numba launch in its backward."""

    def forward(self, x):
        launches.cupy()
        return 2 * x

    def backward(self, gy):
        launches.numba()
        return 2 * gy


@pytest.mark.parametrize("forward, backward", [("lookup", "embedding_backward"), ("mlp_forward", "mlp_backward"),
                                               ("interaction", "interaction_backward"), ("loss", "loss_backward"),
                                               ("upload", "other")])
def test_a_functions_backward_counts_in_the_phase_its_forward_maps_to(forward, backward):
    x = Tensor(np.ones(3, np.float32), requires_grad=True)
    before = mine()
    with launches.phase(forward):
        y = Counted().apply(x)
    with launches.phase("dense_optimizer"):  # where the backward starts does not matter
        y.backward(np.ones(3, np.float32))
    got = launches.COUNTS.since(before, this_thread=True)["by_phase"]
    assert got[forward]["cupy"] == 1 and got[backward]["numba"] == 1, got
    np.testing.assert_array_equal(x.grad, [2, 2, 2])


class _Dispatcher:
    """A stand-in for numba-cuda's kernel dispatcher, whose disk cache cannot hold the first specialization."""

    def __init__(self, message):
        self._cache, self.message, self.compiled = "disk", message, []

    def compile(self, sig):
        self.compiled.append(sig)
        if self._cache == "disk" and len(self.compiled) == 1:
            raise RuntimeError(self.message)
        return f"kernel for {sig}"


def test_a_kernel_the_disk_cache_cannot_hold_compiles_without_it():
    from gpuemb.autograd.launch import UNPICKLABLE, uncached_where_unpicklable
    d = uncached_where_unpicklable(_Dispatcher(f"{UNPICKLABLE} with linking files"))
    assert d.compile("(float16[:],)") == "kernel for (float16[:],)"
    assert d.compiled == ["(float16[:],)"] * 2 and d._cache != "disk"
    assert type(d._cache).__name__ == "NullCache"


def test_other_compile_errors_are_raised():
    from gpuemb.autograd.launch import uncached_where_unpicklable
    d = uncached_where_unpicklable(_Dispatcher("a typing error"))
    with pytest.raises(RuntimeError, match="a typing error"):
        d.compile("(int64[:],)")
    assert d._cache == "disk"


class _Cached:
    """A stand-in for numba-cuda's dispatcher with a disk cache that holds the kernel or not."""

    def __init__(self, in_cache):
        self.overloads, self.specialized, self.targetctx, self.compiled = {}, False, None, []
        self._cache = type("Cache", (), {"load_overload": lambda _, sig, ctx: "kernel" if in_cache else None})()

    def compile(self, sig):
        self.compiled.append(sig)
        time.sleep(0.01)
        return f"kernel for {sig}"


@pytest.mark.parametrize("in_cache", [False, True])
def test_a_cuda_kernel_that_really_compiles_is_heard_as_numbas_compile(in_cache):
    from gpuemb import first_compile
    from gpuemb.autograd.launch import uncached_where_unpicklable
    d = uncached_where_unpicklable(_Cached(in_cache))
    said = []
    sig = (types.float32[::1],)
    with first_compile.watching(said.append, 30) as watch:
        assert d.compile(sig) == f"kernel for {sig}" and d.compiled == [sig]
    assert said == ([] if in_cache else ["compiling kernels on first use, about 30 s; cached for later runs"])
    assert (watch.seconds >= 0.01) is not in_cache
