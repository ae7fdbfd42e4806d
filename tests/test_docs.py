"""Every document a tracked file names (a path ending in .md) is in the repository, so no doc, docstring or config
points at a file that only some machines have."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# A path ending in .md: relative to the repository root, or to the naming file's folder (a Markdown link).
DOC = re.compile(r"[\w./-]*\w\.md\b")
# Files that name a .md they write, not a document to read: file -> those names. This file is not scanned: it
# names them here.
WRITES = {"tools/gpu_report.sh": {"report.md", "OUTDIR/report.md", "OUT/report.md"},
          ".ci/run": {"report_dir/report.md"}, "docs/perf/README.md": {"OUTDIR/report.md"}}
THIS = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"needs a git checkout to list the tracked files ({e})")
    return [f for f in out.split("\0") if f]


def test_every_named_document_is_in_the_repository():
    files = tracked_files()
    present = set(files)
    missing = []
    for name in files:
        if name == THIS:
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):  # binary data, or deleted but not yet committed
            continue
        for ref in set(DOC.findall(text)) - WRITES.get(name, set()):
            candidates = {os.path.normpath(ref), os.path.normpath(os.path.join(os.path.dirname(name), ref))}
            if not candidates & present:
                missing.append(f"{name}: {ref}")
    assert not missing, ("these name a document that is not in the repository; add it, or point at one that is "
                         "(docs/design.md is the architecture):\n" + "\n".join(sorted(missing)))
