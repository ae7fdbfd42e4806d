"""The ``mpiexec`` fixture of the comm tests: a script of workers/ on n ranks, with its exit code, output and time."""
import time
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"


@pytest.fixture
def mpiexec(mpi_run):
    """``(exit code, output, seconds)`` of ``workers/script`` on ``n`` ranks."""
    def run(n, script, *args, timeout_s=120, **env):
        start = time.monotonic()
        done = mpi_run(n, WORKERS / script, *args, timeout_s=timeout_s, **env)
        return done.returncode, done.stdout + done.stderr, time.monotonic() - start
    return run

