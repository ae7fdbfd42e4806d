"""Every tracked .py file keeps its lines within 120 columns, the project's style."""
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT = 120


def tracked_python_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"needs a git checkout to list the tracked files ({e})")
    return [f for f in out.split("\0") if f]


def test_no_tracked_python_line_passes_120_columns():
    files = tracked_python_files()
    assert files, "git lists no tracked .py file"
    long = []
    for name in files:
        path = ROOT / name
        if not path.is_file():  # tracked but deleted in this working tree
            continue
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.split("\n"), 1):
            width = len(line.rstrip("\r"))
            if width > LIMIT:
                long.append(f"{name}:{number}: {width}")
    assert not long, f"lines over {LIMIT} columns (file:line: length):\n" + "\n".join(long)
