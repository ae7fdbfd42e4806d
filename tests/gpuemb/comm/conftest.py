"""The comm tests' fixtures: the environment of a plain process, and a script of workers/ on n ranks."""
from pathlib import Path

import pytest

from gpuemb import comm

WORKERS = Path(__file__).parent / "workers"


@pytest.fixture
def mpiexec(mpi_run):
    """``(exit code, output)`` of ``workers/script`` on ``n`` ranks; past ``timeout_s`` the test fails. What ended
    a run is told by its output, never by a time: a test that compares times fails on a busy machine."""
    def run(n, script, *args, timeout_s=120, **env):
        done = mpi_run(n, WORKERS / script, *args, timeout_s=timeout_s, **env)
        return done.returncode, done.stdout + done.stderr
    return run


@pytest.fixture
def plain_process(monkeypatch):
    """The environment of a process that no launcher started."""
    for name in comm.SIZE_ENV + comm.RANK_ENV + (comm.TIMEOUT_ENV,):
        monkeypatch.delenv(name, raising=False)
