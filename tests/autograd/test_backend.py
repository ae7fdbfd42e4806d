"""Device selection: what GPUEMB_DEVICE picks, and the errors when it cannot."""
import os
import subprocess
import sys

import numpy as np
import pytest

from gpuemb.autograd import backend


def run_with_device(value, code="from gpuemb.autograd import backend; print(backend.DEVICE)", path=None):
    env = {**os.environ, "GPUEMB_DEVICE": value}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_cpu_is_always_available():
    out = run_with_device("cpu", "from gpuemb.autograd import backend; print(backend.DEVICE, backend.xp.__name__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "numpy"]


def test_unknown_device_names_the_choices():
    out = run_with_device("tpu")
    assert out.returncode != 0
    assert "GPUEMB_DEVICE='tpu' is not a device; use one of cpu, cuda, emulated, auto" in out.stderr


@pytest.mark.skipif(backend.real_gpu(), reason="this machine has a GPU, so asking for cuda succeeds")
def test_cuda_without_a_gpu_says_so():
    out = run_with_device("cuda")
    assert out.returncode != 0
    assert "DeviceUnavailableError: GPUEMB_DEVICE=cuda, but no GPU can be used" in out.stderr


@pytest.fixture
def cupy_without_gpu(tmp_path):
    """A stand-in cupy package whose CUDA runtime sees no device: cupy installed on a machine with no GPU."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n")
    return tmp_path


def test_cupy_installed_but_no_gpu_falls_back_to_cpu(cupy_without_gpu):
    out = run_with_device("auto", IMPORT_ALL, path=cupy_without_gpu)
    assert out.returncode == 0, out.stderr
    assert "cupy is installed but sees no CUDA device" in out.stdout
    out = run_with_device("cuda", path=cupy_without_gpu)
    assert out.returncode != 0 and "cupy is installed but sees no CUDA device" in out.stderr


def test_device_info_explains_the_choice():
    info = backend.device_info()
    assert info["device"] in ("cpu", "cuda", "emulated")
    assert info["array_module"] == backend.xp.__name__
    assert "GPUEMB_DEVICE" in info["reason"]


IMPORT_ALL = """
import importlib, pkgutil
names = []
for package in ("gpuemb", "gpuemb.autograd", "gpuemb.optim", "gpuemb.io"):
    module = importlib.import_module(package)
    names += [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]
for name in names:
    importlib.import_module(name)
from gpuemb.autograd import backend
print(len(names), backend.device_info()["reason"])
"""


def test_every_project_module_imports():
    out = run_with_device("auto", IMPORT_ALL)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[0]) > 30


def test_transfers_round_trip(xp, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    d = backend.to_device(a)
    assert backend.get_array_module(d) is backend.xp
    np.testing.assert_array_equal(backend.to_host(d), a)


def test_pinned_buffer_and_streams_work_on_every_device():
    buf = backend.pinned_empty((4, 3), np.float32)
    buf[:] = 1.5
    assert buf.shape == (4, 3) and buf.dtype == np.float32 and float(buf.sum()) == 18.0
    with backend.new_stream() as s:
        s.synchronize()
    backend.synchronize()


def test_scatter_add_accumulates_repeats(xp):
    a = xp.zeros((3, 2))
    backend.scatter_add(a, xp.asarray([0, 2, 0]), xp.ones((3, 2)))
    np.testing.assert_array_equal(backend.to_host(a), [[2, 2], [0, 0], [1, 1]])


@pytest.mark.parametrize("n, high", [(0, 5), (1, 5), (5000, 40), (5000, 1 << 62)])
def test_unique_equals_numpy(xp, rng, n, high):
    keys = rng.integers(-high, high, n)
    values, inverse = backend.unique(xp.asarray(keys), return_inverse=True)
    want, want_inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(backend.to_host(values), want)
    np.testing.assert_array_equal(backend.to_host(inverse), want_inverse)
    np.testing.assert_array_equal(backend.to_host(backend.unique(xp.asarray(keys))), want)
