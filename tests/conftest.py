"""The test harness: every-backend fixtures and the gpu / cudasim markers.

- ``xp``: a test that takes it runs once per backend, NumPy always and the device's module where there is one
  (CuPy on a GPU, its stand-in under ``GPUEMB_DEVICE=emulated``; skipped, with the reason, elsewhere). Compare
  against the NumPy reference.
- ``@pytest.mark.gpu``: runs on a device: a real GPU, or the emulated one (the emulation pass of .ci/run);
  skipped visibly on the CPU.
- ``@pytest.mark.real_gpu``: needs real hardware (speed, memory, cuBLASLt and NCCL themselves); skipped under
  emulation too.
- ``@pytest.mark.cudasim``: runs numba.cuda kernels, either in numba's simulator (``NUMBA_ENABLE_CUDASIM=1``
  set before numba is imported: the second pytest pass of .ci/run) or on a real GPU. Skipped otherwise.
- ``mpi_run``: runs a script on n ranks under a real ``mpiexec`` on the CPU; skipped, with the reason, where
  mpi4py or mpiexec is missing.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy
import pytest

from gpuemb.autograd import backend

CUDASIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
NO_GPU = ("needs a device: a CUDA GPU, or GPUEMB_DEVICE=emulated (the emulation pass of .ci/run); "
          + backend.device_info()["reason"])
NO_REAL_GPU = "needs a real CUDA GPU; " + backend.device_info()["reason"]
NO_CUDA_TARGET = ("runs numba.cuda kernels: needs NUMBA_ENABLE_CUDASIM=1 (the simulator pass of .ci/run: "
                  "`NUMBA_ENABLE_CUDASIM=1 pytest -m cudasim`) or a GPU")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not backend.gpu_available():
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
        if "real_gpu" in item.keywords and not backend.real_gpu():
            item.add_marker(pytest.mark.skip(reason=NO_REAL_GPU))
        if "cudasim" in item.keywords and not (CUDASIM or backend.gpu_available()):
            item.add_marker(pytest.mark.skip(reason=NO_CUDA_TARGET))


@pytest.fixture(params=["numpy", pytest.param("device", marks=pytest.mark.gpu)])
def xp(request):
    """The array module under test: numpy, then the device's (cupy, or the emulated one) where there is one."""
    return numpy if request.param == "numpy" else backend.xp


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's name: fresh random data per test, the same on every run."""
    return numpy.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# pip's mpich wheel puts mpiexec beside the venv's python, which need not be on PATH
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
ROOT = Path(__file__).resolve().parents[1]


_FILE_SIZE_LIMITED = (
    "import resource, runpy, signal, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "sys.argv[0] = sys.argv[1]; del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.fixture
def disk_full_run():
    """``run(limit, script, *args)``: ``script`` (on the CPU) in a process that cannot write a file past ``limit``
    bytes. A full disk without root: a write past the limit fails with EFBIG, as one on a full disk with ENOSPC."""
    pytest.importorskip("resource", reason="RLIMIT_FSIZE needs a POSIX system")

    def run(limit, script, *args):
        env = {**os.environ, "GPUEMB_DEVICE": "cpu"}
        return subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMITED, str(limit), str(script), *map(str, args)],
                              env=env, capture_output=True, text=True, timeout=600)
    return run


@pytest.fixture
def mpi_run():
    """``run(n, script, *args, timeout_s=120, **env)``: ``python script args`` on ``n`` ranks under ``mpiexec``
    (``n = 1``: plain python, no launcher), in the repo root, on the CPU, one thread per rank, with ``env`` on top
    of this process's environment less any launcher's variables; returns the finished process."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the mpi backend needs mpi4py: pip install -e '.[mpi]'")
    if MPIEXEC is None:
        pytest.skip("no mpiexec beside python or on PATH: pip install mpich")

    def run(n, script, *args, timeout_s=120, **env):
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_"))}
        environ.update({"GPUEMB_DEVICE": "cpu", "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **env})
        # Open MPI's mpiexec (the GPU image's) refuses root without these; MPICH ignores them
        environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        command = [sys.executable, str(script), *map(str, args)]
        return subprocess.run(([MPIEXEC, "-n", str(n)] if n > 1 else []) + command, capture_output=True,
                              text=True, timeout=timeout_s, env=environ, cwd=ROOT)
    return run
