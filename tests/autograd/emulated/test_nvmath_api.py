"""The emulated nvmath against the real nvmath-python's signatures, read from the wheels tools/gpu_wheels.sh fetches.

A call that the emulation takes but the real library refuses (an operand passed by position to ``reset_operands``,
say) would fail only on a GPU. So the names, order and kinds of the parameters of every call the project makes, and
the enum values it names, must match nvmath's own. The wheel for this machine's Python (``.whl/host``) is installed
into a scratch folder and imported in a process of its own; nvmath imports without a GPU. The device's wheel in
``.whl/`` is read as source, without importing it, so a wheel built for another Python is checked too.
"""
import ast
import inspect
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuemb.autograd.emulated import nvmath

WHEELS = Path(__file__).resolve().parents[3] / ".whl"
CALLS = {"Matmul": ["__init__", "plan", "execute", "reset_operands", "release_operands", "free"]}
USED_ENUMS = {"MatmulEpilog": ["BIAS", "RELU_BIAS", "RELU_AUX_BIAS", "BGRADB", "DRELU_BGRAD"],
              "MatmulComputeType": ["COMPUTE_32F", "COMPUTE_32F_FAST_16BF", "COMPUTE_32F_FAST_TF32"]}

READ = """
import inspect, json
from nvmath.linalg import advanced as nv
out = {"version": __import__("nvmath").__version__, "calls": {}, "enums": {}}
for cls, methods in CALLS.items():
    for m in methods:
        sig = inspect.signature(getattr(getattr(nv, cls), m))
        out["calls"][cls + "." + m] = [(p.name, p.kind.name) for p in sig.parameters.values()]
out["calls"]["matmul"] = [(p.name, p.kind.name) for p in inspect.signature(nv.matmul).parameters.values()]
for enum, names in ENUMS.items():
    out["enums"][enum] = {n: int(getattr(getattr(nv, enum), n)) for n in names}
print(json.dumps(out))
"""


def emulated_signature(name):
    cls, _, method = name.partition(".")
    fn = getattr(getattr(nvmath, cls), method) if method else getattr(nvmath, cls)
    return [[p.name, p.kind.name] for p in inspect.signature(fn).parameters.values()]


def wheel(folder):
    found = sorted(folder.glob("nvmath_python-*.whl"))
    if not found:
        pytest.skip(f"no nvmath-python wheel in {folder.relative_to(WHEELS.parent)}: run tools/gpu_wheels.sh "
                    "(it downloads, so CI does not)")
    return found[-1]


@pytest.mark.slow
def test_the_emulated_nvmath_takes_the_arguments_the_real_one_takes(tmp_path):
    whl = wheel(WHEELS / "host")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                    str(target), str(whl)], check=True)
    script = f"CALLS = {CALLS!r}\nENUMS = {USED_ENUMS!r}\n" + READ
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"nvmath from {whl.name} did not import: {done.stderr.strip()[-2000:]}"
    real = json.loads(done.stdout)
    for name, params in real["calls"].items():
        assert emulated_signature(name) == params, f"{name} differs from nvmath-python {real['version']}"
    for enum, values in real["enums"].items():
        assert {n: int(getattr(getattr(nvmath, enum), n)) for n in values} == values


def _method_params(tree, cls, method):
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    a = item.args
                    return ([[x.arg, "POSITIONAL_ONLY"] for x in a.posonlyargs]
                            + [[x.arg, "POSITIONAL_OR_KEYWORD"] for x in a.args]
                            + [[x.arg, "KEYWORD_ONLY"] for x in a.kwonlyargs])
    raise AssertionError(f"{cls}.{method} is not in nvmath's matmulmod.py")


def test_the_device_wheel_has_the_stateful_calls_the_mlp_makes():
    whl = wheel(WHEELS)
    with zipfile.ZipFile(whl) as z:
        tree = ast.parse(z.read("nvmath/linalg/advanced/matmulmod.py"))
    for method in CALLS["Matmul"]:
        emulated = [p for p in emulated_signature(f"Matmul.{method}") if p[1] not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
        assert _method_params(tree, "Matmul", method) == emulated, f"Matmul.{method} differs in {whl.name}"
