"""``import gpuemb`` tells OpenBLAS to let its idle threads sleep at once (gpuemb/__init__.py says why), before NumPy
loads, and keeps a value the user set. Checked in a fresh interpreter, where nothing has loaded NumPy yet."""
import os
import subprocess
import sys

import pytest

PROBE = ("import os, sys; import gpuemb; assert 'numpy' not in sys.modules, 'gpuemb loaded NumPy'; "
         "print(os.environ['OPENBLAS_THREAD_TIMEOUT'])")


@pytest.mark.parametrize("given, want", [(None, "4"), ("28", "28")])
def test_import_gpuemb_sets_the_openblas_thread_timeout_unless_given(given, want):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want
