"""Process settings that a CPU step needs to run at its kernels' speed, applied by ``import gpuemb`` before NumPy
loads. Each one is left alone where the user has set it, so that a program embedding gpuemb keeps the last word.

- OpenBLAS's idle threads spin for 2**28 cycles (about 0.1 s) after each matmul before they sleep, and a CPU step
  runs numba's parallel kernels between its matmuls: on the 2-core machine a kernel right after a matmul took 2.8
  ms against 1.7 ms alone, and kaggle's step 64.9 ms against 58.7 ms (medians of 6; docs/perf/README.md). 2**4
  cycles lets them sleep at once. OpenBLAS reads this when it loads, so it holds where NumPy loads after gpuemb.
- numba's parallel kernels run on libgomp's threads, which spin for 300,000 rounds after each kernel before they
  sleep, so the matmul that follows shares the cores with them and took 2x its time (docs/perf/README.md, "Two
  thread pools on two cores"). 1000 rounds lets them sleep almost at once: kaggle's step, gpuemb alone in its
  process, ran at 43.4k samples/s against 42.0k (medians of 3 interleaved rounds, ``tools/bench_sides.py``), where
  ``OMP_WAIT_POLICY=passive`` gave 41.2k and numba's workqueue layer 35.5k. Left alone where the user set
  either variable. libgomp reads it when it loads, so it also holds for torch's own libgomp if torch loads later
  in the same process.
- NumPy asks the kernel for transparent huge pages on every array of 4 MB or more (``madvise``). Where the kernel
  compacts memory for such requests as they fault in (``/sys/kernel/mm/transparent_hugepage/defrag`` set to
  ``madvise``, a common default), a step that maps large arrays afresh stalls in that compaction: on the 2-core
  Xeon, MLPerf DLRM-DCNv2's step ran at 1,337 samples/s with ``NUMPY_MADVISE_HUGEPAGE=0`` against 1,175 without,
  and kaggle's at 43.9k against 41.8k (medians of 3 interleaved rounds, each side in its own process,
  docs/perf/README.md). NumPy reads the variable when it loads.
- glibc's malloc gives freed memory back to the kernel when more than its trim threshold lies free at the top of
  the heap, and serves blocks over its mmap threshold from fresh mappings. A step frees tens of MB of
  activations and gradients and allocates them again, so every step faulted 2,500 to 4,000 pages back in: 10 to
  16 ms of kernel CPU time a step on kaggle's shape, against 2 to 3 ms with the freed pages kept
  (docs/perf/README.md, "Freed pages kept"). gpuemb raises both thresholds, which stops glibc's own adjusting of
  them, so the heap keeps its high-water mark. Blocks over MMAP_THRESHOLD (tables, whole datasets) still come
  from, and go back to, their own mappings.
"""
import ctypes
import os
import sys

OPENBLAS_THREAD_TIMEOUT = "4"
GOMP_SPINCOUNT = "1000"
NUMPY_MADVISE_HUGEPAGE = "0"
THREAD_WAIT_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # where either is set, the user chose how threads wait
# mallopt's parameter numbers (glibc's malloc.h) and their values here. 32 MiB is glibc's ceiling for the mmap
# threshold on 64-bit; the trim threshold only has to exceed what a step frees at once.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 1 << 30
# Where any of these is set, the user has chosen malloc's behaviour, and gpuemb leaves it so
MALLOC_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def _glibc():
    """The C library when it is glibc, else None (musl, macOS and Windows have no mallopt of these parameters)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols the interpreter already has loaded, its C library's among them
        libc.gnu_get_libc_version  # only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_pages():
    """Raise glibc's trim and mmap thresholds, unless the user set malloc's; True where they now hold."""
    if any(name in os.environ for name in MALLOC_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD,
                                                                                      TRIM_THRESHOLD))


def apply():
    """Every setting; returns {setting: whether gpuemb set it}."""
    timeout = "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)
    spin = not any(name in os.environ for name in THREAD_WAIT_SETTINGS)
    if spin:
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT
    huge = "NUMPY_MADVISE_HUGEPAGE" not in os.environ
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", NUMPY_MADVISE_HUGEPAGE)
    return {"openblas_thread_timeout": timeout, "gomp_spincount": spin, "numpy_madvise_hugepage": huge,
            "malloc_thresholds": keep_freed_pages()}


APPLIED = apply()
