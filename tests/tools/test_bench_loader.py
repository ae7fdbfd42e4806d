"""tools/bench_loader.py: each rank's counts of a small synthetic epoch, read as training reads it (the last
partial batch dropped) and as evaluation does (kept, and padded so that every rank has a row of it)."""
import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench_loader.py"


def rows(*flags):
    """``{(W, rank): (rows yielded, rows made)}`` of a run over 3,842 rows: 15 batches of 256 and 2 rows."""
    out = subprocess.run([sys.executable, BENCH, "--rows", "3842", "--batch-size", "256", "--world-sizes", "1", "3",
                          *flags], capture_output=True, text=True, timeout=300, env={**os.environ,
                                                                                     "GPUEMB_DEVICE": "cpu"})
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.findall(r"^\| (\d) \| (\d) \| ([\d,]+) \| \d+ \| ([\d,]+) \|", out.stdout, re.M)
    assert len(found) == 4, out.stdout
    return {(int(w), int(r)): tuple(int(x.replace(",", "")) for x in n) for w, r, *n in found}


def test_each_rank_makes_only_its_part_for_training_and_for_evaluation():
    train = rows()
    assert train[1, 0] == (3840, 3840)  # the 2 rows of the last batch dropped
    assert [train[3, r] for r in range(3)] == [(1275, 1275), (1275, 1275), (1290, 1290)]  # parts of 85, 85, 86
    evaluation = rows("--eval")
    assert evaluation[1, 0] == (3842, 3842)
    # the last batch's 2 rows, one each to ranks 0 and 1, and its last row again to rank 2, as its padding
    assert [evaluation[3, r] for r in range(3)] == [(1276, 1276), (1276, 1276), (1291, 1291)]
