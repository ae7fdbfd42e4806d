"""docs/store.md's example of pretrained rows and of rows to and from TorchRec runs as written, and its checks hold.

The section's Python blocks run in order in one namespace, in a temporary folder (they write .npy files there).
"""
import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the example moves rows to and from torch's nn.EmbeddingBag")

DOC = Path(__file__).resolve().parents[3] / "docs/store.md"
SECTION = "## Pretrained rows, and rows to and from TorchRec"


def blocks():
    """The section's Python blocks, in order."""
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/store.md has no section {SECTION!r}: rename it here too"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run(codes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_store_example"}
    for code in codes:
        exec(compile(code, str(DOC), "exec"), namespace)


def needs_torchrec(code):
    return re.search(r"^\s*(import|from) torchrec\b", code, re.M) is not None


def test_the_plain_torch_example_runs(tmp_path, monkeypatch):
    codes = [c for c in blocks() if not needs_torchrec(c)]
    assert codes, "the section lost its plain torch example"
    run(codes, tmp_path, monkeypatch)


@pytest.mark.skipif(importlib.util.find_spec("torchrec") is None,
                    reason="torchrec is not installed (it is no extra; tools/bench_train_torchrec.py says how)")
def test_the_torchrec_example_runs(tmp_path, monkeypatch):
    codes = blocks()
    assert any(needs_torchrec(c) for c in codes), "the section lost its TorchRec example"
    run(codes, tmp_path, monkeypatch)
