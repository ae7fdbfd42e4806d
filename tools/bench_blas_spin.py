"""How much two CPU thread pools slow each other: a numba parallel kernel right after an OpenBLAS matmul, and a
matmul right after the kernel, against each run back to back (medians of --repeats calls, ms).

A CPU step alternates the two. OpenBLAS's idle threads spin for 2**OPENBLAS_THREAD_TIMEOUT cycles after a matmul
(28 unless set), and libgomp's, which run numba's kernels, for GOMP_SPINCOUNT spins: whichever runs next shares
the cores with the other's spinning threads. Compare settings by environment, e.g.

    python tools/bench_blas_spin.py                                # import gpuemb first: OpenBLAS's timeout 4
    OPENBLAS_THREAD_TIMEOUT=28 python tools/bench_blas_spin.py     # OpenBLAS's default
    GOMP_SPINCOUNT=1000 python tools/bench_blas_spin.py
"""
import argparse
import os
import sys
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import gpuemb  # noqa: F401  first, so that its OpenBLAS setting holds when NumPy loads (gpuemb/host_tuning.py)
import numba
import numpy as np


@numba.njit(parallel=True)
def row_norms(a, out):
    for i in numba.prange(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j] * a[i, j]
        out[i] = s


def median_ms(first, timed, n):
    """The median time of ``timed()``, each call right after ``first()``."""
    times = []
    for _ in range(n):
        first()
        t0 = time.perf_counter()
        timed()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def main(argv=None):
    intro, _, rest = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=intro.replace("\n", " "), epilog=rest,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=200, help="timed calls whose median each figure is (default: 200)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: give at least one timed call")
    rng = np.random.default_rng(0)
    a, out = rng.random((2048, 2000)), np.empty(2048)
    x, w = rng.random((2048, 512), np.float32), rng.random((512, 256), np.float32)
    kernel, matmul = (lambda: row_norms(a, out)), (lambda: x @ w)
    kernel()
    n = args.repeats
    print(f"kernel after a kernel {median_ms(kernel, kernel, n):.2f} ms, after a matmul "
          f"{median_ms(matmul, kernel, n):.2f} ms; matmul after a matmul {median_ms(matmul, matmul, n):.2f} ms, "
          f"after a kernel {median_ms(kernel, matmul, n):.2f} ms "
          f"(numba layer {numba.threading_layer()}, {numba.get_num_threads()} threads)")


if __name__ == "__main__":
    _entry.run(main)
