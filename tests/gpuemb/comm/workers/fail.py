"""Run by test_mpi.py under ``mpiexec -n 2``: rank 1 raises (``raise``), hangs (``hang``) or exits before
``comm.init`` (``exit``) while rank 0 goes on into an allreduce, blocking or, with a second argument
``overlapped``, started on an ``OverlappedCommunicator`` and waited for. The job must end non-zero within the
timeout; "passed" must never print. Rank 0 says how much CPU it used while it waited, as it aborts."""
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
cpu, wall, abort = time.process_time(), time.monotonic(), c._abort_world


def report_then_abort():
    print(f"rank 0 waited {time.monotonic() - wall:.3f} s on {time.process_time() - cpu:.3f} s of CPU", flush=True)
    abort()


c._abort_world = report_then_abort
if sys.argv[2:] == ["overlapped"]:  # the allreduce runs on the overlapped thread; the caller waits for it
    comm.OverlappedCommunicator(c).start("allreduce", np.ones(3)).wait()
else:
    c.allreduce(np.ones(3))
print(f"rank {c.rank}: passed the allreduce", flush=True)
