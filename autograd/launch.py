"""What every numba.cuda kernel needs: a definition the device can launch, a grid size and the stream that CuPy is
using.

It sits beside the backend, below every package that launches kernels (optim, gpuemb.kernels, gpuemb.store).
"""
import contextlib

from numba import cuda
from numba.core import event, sigutils

from . import backend, module_launch  # noqa: F401 (reads GPUEMB_KERNEL_LAUNCH once, so a bad value stops here)

KERNELS = {}
"""Every kernel defined through :func:`kernel`, by ``module.name``: the PTX check compiles each of them."""


def kernel(fn=None, *, cache=True):
    """``cuda.jit`` for a kernel (not a device function), handed to the backend so that the chosen device's arrays
    reach it: on a GPU launched by CuPy with numba's argument layout (module_launch.py), under the emulated device
    through that same layout, into numba's simulator."""
    if fn is None:
        return lambda f: kernel(f, cache=cache)
    dispatcher = backend.launchable(uncached_where_unpicklable(cuda.jit(cache=cache)(fn)) if cache else cuda.jit(fn))
    KERNELS[f"{fn.__module__}.{fn.__qualname__}"] = dispatcher
    return dispatcher


UNPICKLABLE = "Cannot pickle CUDACodeLibrary"


def uncached_where_unpicklable(dispatcher):
    """``dispatcher``, compiling without its disk cache once the cache cannot hold a specialization, and saying
    when it really compiles.

    numba-cuda cannot write a kernel that links other files to its cache: a float16 specialization links CUDA's
    fp16 library, and saving it raised "Cannot pickle CUDACodeLibrary with linking files" after compiling, on the
    first GPU run (docs/perf/README.md). That kernel then compiles once a process, as an uncached one would.

    numba-cuda raises no event when it compiles a kernel (numba does, for its CPU functions), so a GPU's first step
    spent half a minute compiling without a word. A compile that neither memory nor the disk cache can answer is
    raised here as numba's own ``numba:compile`` event, which ``gpuemb.first_compile`` hears."""
    compile_ = getattr(dispatcher, "compile", None)
    if compile_ is None or not hasattr(dispatcher, "_cache"):  # the simulator's dispatcher has no disk cache
        return dispatcher

    def compile(sig):
        heard = event.trigger_event(COMPILE_EVENT, data={"dispatcher": dispatcher, "args": sig, "return_type": None}) \
            if _will_compile(dispatcher, sig) else contextlib.nullcontext()
        with heard:
            try:
                return compile_(sig)
            except RuntimeError as e:
                if UNPICKLABLE not in str(e):
                    raise
                dispatcher._cache = _null_cache()
                return compile_(sig)
    dispatcher.compile = compile
    return dispatcher


COMPILE_EVENT = "numba:compile"


def _will_compile(dispatcher, sig):
    """Whether ``dispatcher.compile(sig)`` builds the kernel: it is neither in memory nor in the disk cache (a
    first call per signature asks the cache once more, which costs milliseconds)."""
    try:
        argtypes, _ = sigutils.normalize_signature(sig)
        if dispatcher.specialized or argtypes in dispatcher.overloads:
            return False
        configure = getattr(dispatcher, "_configure_cache_for_launch_config", None)
        if configure is not None:  # the cache's key depends on the launch, as compile itself sets it first
            from numba.cuda import launchconfig
            configure(launchconfig.current_launch_config())
        return dispatcher._cache.load_overload(sig, dispatcher.targetctx) is None
    except Exception:  # another numba-cuda's internals, or a stand-in: stay silent rather than fail a launch
        return False


def _null_cache():
    try:
        from numba.cuda.core.caching import NullCache  # numba-cuda's own
    except ImportError:
        from numba.core.caching import NullCache  # releases that used numba's
    return NullCache()


def blocks_for(n, threads=256):
    """Blocks of ``threads`` that cover ``n`` threads (at least one, so an empty launch stays valid)."""
    return max(1, (int(n) + threads - 1) // threads)


WARP = 32


def width(threads):
    """The block width to launch a kernel whose threads stride by ``cuda.blockDim.x``: ``threads`` on a GPU and in
    the kernels' own simulator tests, one warp on the emulated device (``over`` says why)."""
    return min(threads, WARP) if backend.DEVICE == "emulated" else threads


def over(n, like, threads=256):
    """The launch ``(blocks, threads, stream)`` of a kernel that strides over ``n`` items (``for k in
    range(cuda.grid(1), n, cuda.gridsize(1))``) on ``like``'s stream: a thread an item on a GPU and in the kernels'
    simulator tests (``-m cudasim``, on the CPU device, so that those cover many blocks); one thread for them all
    on the emulated device.

    numba's simulator makes each CUDA thread a Python thread, about 0.4 ms apiece to start on CI's 2 cores, and
    many of them at once thrash the interpreter's lock (a launch of 1,712 items took 0.14 s or 9.9 s by turns on
    32 threads). At the emulated device's tiny batches a training step spent 95% of its time there, and the
    emulation pass was over half of CI: tools/count_step.py's dcn-multihot case (4 steps) took 87.5 s, and 8.0 s on
    one thread. The items, the results and the launches (the counts the tests hold to budgets) are the same."""
    if backend.DEVICE == "emulated":
        return 1, 1, stream_for(like)
    return blocks_for(n, threads), threads, stream_for(like)


def stream_for(array):
    """The numba view of CuPy's current stream for device arrays, so kernels order with CuPy's own work.

    Host arrays (the simulator's, or a test handing NumPy to a real GPU) get the default stream: numba copies
    them to the device and back around the launch.
    """
    return backend.kernel_stream(array)
