"""Fixtures of the data tests: the real samples in tests/io/data (copied from ../shared/data) and damaged copies."""
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data():
    """The folder holding the four real samples."""
    return DATA


@pytest.fixture
def damaged(tmp_path):
    """``damaged(name, {line_number: new_line})``: a copy of a sample with those lines (1-based) replaced."""
    def make(name, edits, suffix=""):
        lines = (DATA / name).read_text().split("\n")
        for number, text in edits.items():
            lines[number - 1] = text
        path = tmp_path / (name + suffix)
        path.write_text("\n".join(lines))
        return path
    return make
