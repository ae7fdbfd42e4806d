"""tools/bench_init.py as a user runs it, at a tiny size: a row per kind and draw, each a positive time."""
import json
import os
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "bench_init.py"


def test_each_kind_and_draw_gets_a_row(tmp_path):
    out = subprocess.run([sys.executable, str(TOOL), "--keys", "300", "--dim", "9", "--repeats", "2", "--json",
                          str(tmp_path / "i.json")], env={**os.environ, "GPUEMB_DEVICE": "cpu"},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "i.json").read_text())["rows"]
    assert [(r["kind"], r["draw"]) for r in rows] == [(k, d) for k in ("uniform", "normal", "truncated_normal")
                                                      for d in (1, 2)]
    assert all(r["ms"] > 0 for r in rows) and out.stdout.count(" ns an element") == 6


def test_a_count_below_one_is_one_line():
    out = subprocess.run([sys.executable, str(TOOL), "--keys", "0"], env={**os.environ, "GPUEMB_DEVICE": "cpu"},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "--keys, --dim and --repeats take a count >= 1" in out.stderr
    assert "Traceback" not in out.stderr
