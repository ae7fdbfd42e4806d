"""``import gpuemb`` sets OpenBLAS's thread timeout and glibc's malloc thresholds (gpuemb/host_tuning.py says why),
before NumPy loads, and keeps what the user set. Checked in fresh interpreters, where nothing has loaded NumPy."""
import os
import subprocess
import sys

import pytest

from gpuemb import host_tuning

PROBE = ("import os, sys; import gpuemb; assert 'numpy' not in sys.modules, 'gpuemb loaded NumPy'; "
         "print(os.environ['OPENBLAS_THREAD_TIMEOUT'])")

# Three rounds of 48 one-MiB arrays, each round freed whole; prints the page faults of the last round. With glibc's
# own thresholds the freed heap top is trimmed, and the round faults its 12,288 pages in again.
CHURN = """
import resource, gpuemb, numpy as np
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1 << 18, np.float32) for _ in range(48)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del arrays
print(gpuemb.host_tuning.APPLIED["malloc_thresholds"], faults)
"""


def _run(code, **set_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_THREAD_TIMEOUT", "NUMPY_MADVISE_HUGEPAGE", *host_tuning.THREAD_WAIT_SETTINGS,
                        *host_tuning.MALLOC_SETTINGS)}
    env.pop("GLIBC_TUNABLES", None)
    env.update(set_env)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("given, want", [({}, "4"), ({"OPENBLAS_THREAD_TIMEOUT": "28"}, "28")])
def test_import_gpuemb_sets_the_openblas_thread_timeout_unless_given(given, want):
    assert _run(PROBE, **given) == [want]


SPIN = "import os, gpuemb; print(os.environ.get('GOMP_SPINCOUNT', '-'), gpuemb.host_tuning.APPLIED['gomp_spincount'])"


@pytest.mark.parametrize("given, want", [({}, ["1000", "True"]), ({"GOMP_SPINCOUNT": "5"}, ["5", "False"]),
                                         ({"OMP_WAIT_POLICY": "active"}, ["-", "False"])])
def test_import_gpuemb_lets_libgomps_threads_sleep_soon_unless_the_user_chose_how_they_wait(given, want):
    assert _run(SPIN, **given) == want


# NumPy's own switch, read when it loads: whether it madvises huge pages for large arrays
HUGE = "import gpuemb, numpy as np; print(int(np._core.multiarray._get_madvise_hugepage()))"


@pytest.mark.parametrize("given, want", [({}, ["0"]), ({"NUMPY_MADVISE_HUGEPAGE": "1"}, ["1"])])
def test_import_gpuemb_stops_numpys_huge_page_requests_unless_the_user_chose(given, want):
    assert _run(HUGE, **given) == want


@pytest.mark.skipif(host_tuning._glibc() is None, reason="mallopt's thresholds are glibc's; this C library is not")
def test_freed_pages_are_kept_for_the_next_step_unless_the_user_set_malloc():
    applied, faults = _run(CHURN)
    assert applied == "True" and int(faults) < 1000, faults  # 48 MiB allocated again from pages already mapped
    applied, faults = _run(CHURN, MALLOC_TRIM_THRESHOLD_="131072")  # the user's choice (glibc's default) holds
    assert applied == "False" and int(faults) > 10000, faults
