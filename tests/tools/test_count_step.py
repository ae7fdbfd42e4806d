"""tools/count_step.py: its help, its refusal of a process on another device, and one tiny case end to end on the
emulated device (in the emulation pass of .ci/run, in this process, whose gpuemb is already on it)."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from gpuemb.autograd import backend, launches

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "count_step.py"


def count_step():
    spec = importlib.util.spec_from_file_location("count_step", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_lists_the_cases():
    out = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "GPUEMB_DEVICE": "cpu"})
    assert out.returncode == 0, out.stderr
    assert "--cases" in out.stdout and "dlrm-shared" in out.stdout and "dcn-multihot" in out.stdout


@pytest.mark.skipif(backend.DEVICE == "emulated", reason="this process is on the emulated device, which it counts")
def test_a_process_on_another_device_is_refused_in_one_line(capsys):
    assert count_step().main(["--cases", "dlrm-13"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"imported on {backend.DEVICE}" in err and "emulated" in err


@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="counts the emulated device; on a GPU it would refuse, as on the CPU")
def test_one_tiny_case_counts_every_kind_by_phase(tmp_path, capsys):
    path = tmp_path / "counts.json"
    assert count_step().main(["--cases", "dlrm-13", "--warmup", "1", "--batch", "8", "--json", str(path)]) == 0
    counts = json.loads(path.read_text())["cases"]["dlrm-13"]["per_step"]
    for field in launches.FIELDS:  # the step's total is its phases'
        assert counts[field] == pytest.approx(sum(p[field] for p in counts["by_phase"].values())), field
    assert counts["numba"] > 0 and counts["cupy"] > 0 and counts["cublaslt"] > 0 and counts["readbacks"] >= 1
    phases = counts["by_phase"]
    assert {"lookup", "mlp_forward", "mlp_backward", "embedding_backward", "loss", "dense_optimizer",
            "prefetch"} <= set(phases), phases
    assert phases["mlp_forward"]["cublaslt"] > 0 and phases["loss"]["readbacks"] == 1  # the matmuls; the loss read
    printed = capsys.readouterr().out
    assert "dlrm-13: DLRM, 13 sparse features" in printed and "embedding_backward" in printed
