"""The help of the flags: an inverted flag (``--no-progress``) says what giving it does, and shows no default."""
import dataclasses

from gpuemb.train.cli import _argument
from gpuemb.train.config import SECTIONS
from gpuemb.train.fields import flag_of, key_of

INVERTED = [f for cls in SECTIONS.values() for f in dataclasses.fields(cls)
            if f.metadata["kind"] == "bool" and flag_of(f) == "--no-" + key_of(f).replace("_", "-")]


def test_inverted_flags_show_no_default():
    assert {key_of(f) for f in INVERTED} >= {"progress", "pipeline"}
    for f in INVERTED:
        kw = _argument(f)
        assert kw["action"] == "store_false" and "default" not in kw["help"], (flag_of(f), kw["help"])
        assert flag_of(f) not in kw["help"], kw["help"]  # "--no-x: ... progress bar" read as if it showed one


def test_no_progress_says_it_turns_the_bar_off():
    (f,) = [f for f in INVERTED if key_of(f) == "progress"]
    assert _argument(f)["help"] == "print plain lines instead of a progress bar"
