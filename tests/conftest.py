"""The test harness: every-backend fixtures and the gpu / cudasim markers.

- ``xp``: a test that takes it runs once per backend, NumPy always and CuPy where there is a GPU (that run is
  skipped, with the reason, elsewhere). Compare against the NumPy reference.
- ``@pytest.mark.gpu``: needs a real CUDA GPU; skipped visibly where there is none.
- ``@pytest.mark.cudasim``: runs numba.cuda kernels, either in numba's simulator (``NUMBA_ENABLE_CUDASIM=1``
  set before numba is imported: the second pytest pass of .ci/run) or on a real GPU. Skipped otherwise.
"""
import os
import zlib

import numpy
import pytest

from gpuemb.autograd import backend

CUDASIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
NO_GPU = "needs a CUDA GPU; " + backend.device_info()["reason"]
NO_CUDA_TARGET = ("runs numba.cuda kernels: needs NUMBA_ENABLE_CUDASIM=1 (the simulator pass of .ci/run: "
                  "`NUMBA_ENABLE_CUDASIM=1 pytest -m cudasim`) or a GPU")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not backend.gpu_available():
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
        if "cudasim" in item.keywords and not (CUDASIM or backend.gpu_available()):
            item.add_marker(pytest.mark.skip(reason=NO_CUDA_TARGET))


def _module(name):
    return next(m for m in backend.array_modules() if m.__name__ == name)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module under test: numpy, then cupy where there is a GPU."""
    return _module(request.param)


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's name: fresh random data per test, the same on every run."""
    return numpy.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
