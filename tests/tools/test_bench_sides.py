"""tools/bench_sides.py and tools/bench_peer.py as a user runs them (subprocesses, tiny shapes): each side in a
process of its own, on the same batches, and the ratios taken round by round. No time is compared: the rates come
from a shared, busy machine."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="the plain torch peer needs torch (pip install -e '.[test]')")

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
TINY = ("--cap", "2000", "--batch-size", "64", "--steps", "2", "--warmup", "1")


def tool(name, *args):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu"}
    return subprocess.run([sys.executable, str(TOOLS / name), *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_peer_trains_the_batches_bench_train_trains_without_importing_gpuemb(tmp_path):
    batches = tmp_path / "b.npz"
    out = tool("bench_train.py", *TINY, "--dump-batches", str(batches))
    assert out.returncode == 0, out.stderr
    with np.load(batches) as f:
        assert f["sparse"].shape == (3, 64, 26) and f["label"].shape == (3, 64)
        assert len(np.unique(f["sparse"])) > 26  # real ids, not a constant
    alone = tool("bench_peer.py", str(batches), "--side", "torch", "--json", str(tmp_path / "p.json"))
    assert alone.returncode == 0, alone.stderr
    p = json.loads((tmp_path / "p.json").read_text())
    assert p["imported_gpuemb"] is False and p["imported_numba"] is False and p["samples_per_s"] > 0
    # the same model on the same batches in bench_train's own process: the same loss, to float32 rounding
    together = tool("bench_train.py", *TINY, "--stores", "device", "--pipeline", "on", "--no-torchrec", "--json",
                    str(tmp_path / "t.json"))
    assert together.returncode == 0, together.stderr
    (result,) = json.loads((tmp_path / "t.json").read_text())["results"]
    assert p["loss"] == pytest.approx(result["peers"]["torch"]["loss"], rel=1e-5)


def test_rounds_turn_the_order_and_each_ratio_is_of_its_own_round(tmp_path):
    out = tool("bench_sides.py", *TINY, "--tables", "shared", "per-feature", "--peers", "torch", "--repeats", "2",
               "--no-warm", "--json", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    (result,) = json.loads((tmp_path / "s.json").read_text())["results"]
    names = [s["name"] for s in result["sides"]]
    assert names == ["gpuemb shared", "gpuemb per-feature", "torch"]
    rounds = [line.split(": ", 1)[1].split("  ")[0].strip() for line in out.stdout.splitlines() if "round " in line]
    assert rounds == names + names[1:] + names[:1]  # the second round starts one place later
    peer = result["sides"][2]["rates"]
    for side in result["sides"][:2]:
        assert len(side["rates"]) == 2 and all(r > 0 for r in side["rates"]), side
        assert side["vs_torch"] == pytest.approx([a / b for a, b in zip(side["rates"], peer)])
        assert all(run["loss"] < 5 for run in side["runs"])
    # each side's GEMM floor, on its own BLAS, in its own process: NumPy's for gpuemb, torch's for the peer
    assert all(run["gemm_floor_ms"] > 0 for side in result["sides"] for run in side["runs"])
    assert "GEMM floor ms" in out.stdout


def test_a_bad_variant_or_a_file_that_is_not_a_batch_file_is_one_line(tmp_path):
    out = tool("bench_sides.py", "--variant", "no-equals-sign")
    assert out.returncode == 2 and "NAME:VAR=VALUE" in out.stderr and "Traceback" not in out.stderr
    bad = tmp_path / "b.npz"
    bad.write_bytes(b"not a zip file at all")
    out = tool("bench_peer.py", str(bad), "--side", "torch")
    assert out.returncode != 0 and "--dump-batches" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
