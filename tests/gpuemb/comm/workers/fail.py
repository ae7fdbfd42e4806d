"""Run by test_mpi.py under ``mpiexec -n 2``: rank 1 raises (``raise``), hangs (``hang``) or exits before
``comm.init`` (``exit``) while rank 0 goes on into an allreduce. The job must end non-zero within the timeout;
"passed" must never print."""
import os
import sys
import time

import numpy as np

mode = sys.argv[1]
if mode == "exit" and os.environ["PMI_RANK"] == "1":  # hydra's rank, as gpuemb is not even imported yet
    sys.exit(3)

from gpuemb import comm  # noqa: E402 (a rank that exits early must do so before MPI starts)

c = comm.init("mpi")
if c.rank == 1:
    if mode == "raise":
        raise RuntimeError("planted failure")
    time.sleep(120)
c.allreduce(np.ones(3))
print(f"rank {c.rank}: passed the allreduce", flush=True)
