"""The one place that decides between CuPy and NumPy.

The device is picked once, at import, from ``GPUEMB_DEVICE``:

- ``cpu``: NumPy arrays and numba CPU kernels;
- ``cuda``: CuPy arrays; raises :class:`DeviceUnavailableError` if there is no usable GPU;
- ``emulated``: a strict NumPy stand-in for CuPy, cuBLASLt and NCCL (``autograd/emulated/``), with numba.cuda
  kernels in numba's simulator: the GPU code paths, run on a CPU. A test device, chosen only by name;
- ``auto`` (the default): CUDA when ``cupy.cuda.is_available()`` is true, else the CPU.

Everything else in the project asks this module: ``xp`` for new arrays, :func:`get_array_module` for the
module that matches arrays it was handed, :func:`library` for the GPU libraries (cupyx, NCCL, nvmath), and
:func:`to_device`, :func:`to_host`, :func:`item` and :func:`synchronize` to cross between host and device, which
``transfers`` counts (and ``launches``, which counts the reads back among them and, under the emulated device, the
work launched). No other module imports cupy, and none knows that the emulated device exists.
"""
import os
import time

import numpy

from . import launches, transfers

DEVICES = ("cpu", "cuda", "emulated", "auto")

# numba's parallel kernels run on OpenMP threads that spin after each kernel, which starves the BLAS threads
# of the matmul that follows on a small machine (measured on 2 cores: a matmul + ReLU kernel pair took about 3x
# longer). Passive waiting frees the cores. It must be set before the first parallel kernel starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class DeviceUnavailableError(RuntimeError):
    """The requested device cannot be used on this machine."""


def _probe_cupy():
    """Return (cupy or None, the reason why not)."""
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name == "cupy":
            return None, "cupy is not installed"
        return None, f"cupy is not importable, it needs {e.name!r}, which is not installed"
    except Exception as e:  # a broken CUDA install raising at import
        return None, f"cupy is not importable ({type(e).__name__}: {e})"
    try:
        if not cupy.cuda.is_available():
            return None, "cupy is installed but sees no CUDA device"
    except Exception as e:
        return None, f"cupy is installed but the CUDA driver failed ({type(e).__name__}: {e})"
    return cupy, "cupy sees a CUDA device"


def _select(requested):
    if requested not in DEVICES:
        raise ValueError(
            f"GPUEMB_DEVICE={requested!r} is not a device; use one of {', '.join(DEVICES)}")
    if requested == "cpu":
        return "cpu", None, "GPUEMB_DEVICE=cpu"
    if requested == "emulated":
        from . import emulated
        emulated.switch_on_simulator()  # raises DeviceUnavailableError when it is too late
        return ("emulated", emulated.cupy,
                "GPUEMB_DEVICE=emulated: NumPy behind CuPy's API, kernels in numba's simulator")
    cupy_mod, why = _probe_cupy()
    if requested == "cuda":
        if cupy_mod is None:
            raise DeviceUnavailableError(
                f"GPUEMB_DEVICE=cuda, but no GPU can be used: {why}. "
                "Install the gpu extra on a machine with a GPU, or set GPUEMB_DEVICE=cpu or auto.")
        return "cuda", cupy_mod, f"GPUEMB_DEVICE=cuda and {why}"
    if cupy_mod is None:
        return "cpu", None, f"GPUEMB_DEVICE=auto and {why}"
    return "cuda", cupy_mod, f"GPUEMB_DEVICE=auto and {why}"


_REQUESTED = os.environ.get("GPUEMB_DEVICE", "auto").strip().lower() or "auto"
DEVICE, _cupy, _REASON = _select(_REQUESTED)
xp = numpy if _cupy is None else _cupy
"""The array module of the chosen device: cupy (or its emulation) or numpy."""
_REAL_GPU = DEVICE == "cuda"


def device_info():
    """What was chosen and why, as a dict that prints well."""
    info = {"device": DEVICE, "requested": _REQUESTED, "reason": _REASON, "array_module": xp.__name__}
    if _cupy is not None:
        dev = _cupy.cuda.Device()
        props = _cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        info.update(gpu=name.decode() if isinstance(name, bytes) else name, gpu_id=dev.id,
                    total_memory=int(props["totalGlobalMem"]), cupy=_cupy.__version__)
    return info


def array_modules():
    """Every array module in use: numpy always, cupy where the GPU was chosen. For tests and benchmarks."""
    return [numpy] if _cupy is None else [numpy, _cupy]


def gpu_available():
    """True when a device was chosen: a GPU, or the emulated one."""
    return _cupy is not None


def real_gpu():
    """True on a real CUDA GPU only: what speed, memory and real library behaviour need."""
    return _REAL_GPU


def get_array_module(*arrays):
    """cupy if any argument is a cupy array, else numpy (Chainer's rule)."""
    if _cupy is not None:
        return _cupy.get_array_module(*arrays)
    return numpy


def is_device_array(a):
    return _cupy is not None and isinstance(a, _cupy.ndarray)


def to_host(a):
    """A NumPy array with the same data (a copy when it lives on the GPU)."""
    if is_device_array(a):
        if _REAL_GPU:
            transfers.to_host(a.nbytes)
            transfers.sync()  # into pageable memory: the copy returns once the stream has run up to it
            launches.readback()
        return _cupy.asnumpy(a)
    return numpy.asarray(a)


def to_device(a, dtype=None):
    """An array of the chosen device with the same data (one upload when ``a`` is on the host)."""
    if _REAL_GPU and not is_device_array(a):
        transfers.to_device(numpy.asarray(a).nbytes)
    return xp.asarray(a, dtype=dtype)


def item(a):
    """The Python scalar held by a one-element array: on a device, a copy back and a wait for the stream."""
    if is_device_array(a):
        if _REAL_GPU:
            transfers.to_host(a.itemsize)
            transfers.sync()
            launches.readback()
        return a.item()
    return a.item() if isinstance(a, (numpy.ndarray, numpy.generic)) else a


def library(name):
    """The device's GPU library ``name``: ``cupyx``, ``nccl`` (CuPy's binding), ``nvmath.linalg`` or
    ``nvmath.linalg.advanced``, imported on first use; under the emulated device, its stand-in."""
    if DEVICE == "emulated":
        return _cupy.library(name)
    import importlib
    return importlib.import_module({"nccl": "cupy.cuda.nccl"}.get(name, name))


def launchable(dispatcher):
    """A ``cuda.jit`` kernel, as the chosen device launches it (autograd/launch.py): on a GPU, by CuPy from the code
    numba compiled (autograd/module_launch.py), unless ``GPUEMB_KERNEL_LAUNCH=numba``."""
    if DEVICE == "emulated":
        return _cupy.launchable(dispatcher)
    from . import module_launch
    if _REAL_GPU and module_launch.LAUNCHER == "cupy":
        return module_launch.CupyLaunchable(dispatcher, _cupy)
    return dispatcher


def kernel_stream(array):
    """The stream a kernel launch takes: CuPy's current one for a real GPU's arrays, so kernels order with CuPy's
    own work; the default one otherwise (the simulator runs every launch at once)."""
    if _REAL_GPU and is_device_array(array):
        from . import module_launch
        if module_launch.LAUNCHER == "cupy":  # CuPy launches on it as it is; a numba launch wraps it (numba_stream)
            return current_stream()
        from numba import cuda
        return cuda.external_stream(current_stream().ptr)
    return 0


HOST_ALIGN = 64  # bytes: XLA's CPU client (jax.numpy.from_dlpack) copies any buffer that starts elsewhere


def aligned_empty(shape, dtype):
    """A host array whose data starts on a ``HOST_ALIGN``-byte boundary. NumPy aligns only to 16, so about three in
    four of its arrays would be copied by a DLPack consumer that wants 64; the store's outputs, which other stacks
    take without a copy, are made here."""
    dtype = numpy.dtype(dtype)
    nbytes = int(numpy.prod(shape, dtype=numpy.int64)) * dtype.itemsize
    raw = numpy.empty(nbytes + HOST_ALIGN, numpy.uint8)
    start = -raw.ctypes.data % HOST_ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def pinned_empty(shape, dtype=numpy.float32):
    """A host array in page-locked memory where there is a GPU, so copies to the device can be asynchronous."""
    if _cupy is None:
        return numpy.empty(shape, dtype=dtype)
    return library("cupyx").empty_pinned(shape, dtype=dtype)


class _NullStream:
    """Stands in for a CUDA stream on the CPU, where work is already ordered."""

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def new_stream(non_blocking=True):
    """A CUDA stream on the GPU; a no-op context on the CPU."""
    if _cupy is None:
        return _NullStream()
    return _cupy.cuda.Stream(non_blocking=non_blocking)


def current_device():
    """The calling thread's GPU, as a context that makes it current in another thread (the CUDA runtime's current
    device is per thread: a new thread starts on GPU 0); a no-op context on the CPU."""
    if _cupy is None:
        return _NullStream()
    return _cupy.cuda.Device()


def current_stream():
    if _cupy is None:
        return _NullStream()
    return _cupy.cuda.get_current_stream()


def record_event():
    """An event marking the work queued so far on the current stream, for another stream to wait on
    (:func:`wait_event`) without the host waiting; None on the CPU, where work is already ordered."""
    if _cupy is None:
        return None
    event = _cupy.cuda.Event(disable_timing=True)
    event.record(current_stream())
    return event


def wait_event(event):
    """Make the current stream's later work wait, on the device, for the work ``event`` marks; the host goes on."""
    if event is not None:
        current_stream().wait_event(event)


def time_mark():
    """Now, for timing spans of the work queued: on a device an event recorded on the current stream (its time is
    the device's when it gets there), on the CPU the wall clock. Reading spans is ``seconds_between``."""
    if _cupy is None:
        return time.perf_counter()
    event = _cupy.cuda.Event()
    event.record(current_stream())
    return event


def seconds_between(marks):
    """The seconds from each of ``marks`` (of ``time_mark``, in the order taken) to the next: on a device, one
    wait, for the last of them."""
    if _cupy is None:
        return [b - a for a, b in zip(marks, marks[1:])]
    if marks:
        if _REAL_GPU:
            transfers.sync()
        marks[-1].synchronize()
    return [_cupy.cuda.get_elapsed_time(a, b) / 1e3 for a, b in zip(marks, marks[1:])]


def synchronize():
    """Wait for all GPU work of this device; nothing on the CPU."""
    if _cupy is not None:
        if _REAL_GPU:
            transfers.sync()
        _cupy.cuda.Device().synchronize()


def scatter_add(a, indices, values):
    """``a[indices] += values`` with repeated indices accumulated, on either backend."""
    if is_device_array(a):
        library("cupyx").scatter_add(a, indices, values)
    else:
        numpy.add.at(a, indices, values)



def unique(a, return_inverse=False):
    """The sorted distinct values of ``a`` (flattened) and, if asked, each element's index among them, by one sort.

    numpy 2.4's ``np.unique`` without ``return_*`` took 0.9 s for 200k int64 keys here (a hashing path), against
    10 ms for this; the store calls it on every batch.
    """
    xp = get_array_module(a)
    a = a.ravel()
    if not return_inverse:
        s = xp.sort(a)
        return s[first_of_runs(s)]
    order = xp.argsort(a)
    s = a[order]
    first = first_of_runs(s)
    inverse = xp.empty(a.shape[0], dtype=numpy.int64)
    inverse[order] = xp.cumsum(first) - 1
    return s[first], inverse


def first_of_runs(s):
    """A mask of the sorted ``s`` [n]: True where a run of equal values begins (``unique`` keeps those)."""
    xp = get_array_module(s)
    first = xp.empty(s.shape[0], dtype=bool)
    first[:1] = True
    xp.not_equal(s[1:], s[:-1], out=first[1:])
    return first
