"""What the distributed tests share: ``mpiexec``, which runs a worker of workers/ on n ranks."""
import re
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"


@pytest.fixture
def mpiexec(mpi_run):
    """``run(n, script, *args)``: ``workers/script`` on ``n`` ranks; asserts that it exits 0 with every rank saying
    "rank R: ok"."""
    def run(n, script, *args, timeout_s=120, **env):
        done = mpi_run(n, WORKERS / script, *args, timeout_s=timeout_s, GPUEMB_COMM_TIMEOUT="60", **env)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        # mpiexec may splice the lines of different ranks together
        assert sorted(map(int, re.findall(r"rank (\d+): ok", output))) == list(range(n)), output
        return output
    return run
