"""Every flag of every tool says what it does in ``--help`` (issue 31: bench_*, plan, export... had bare flags).

Each tool runs as ``python tools/X.py --help`` would, in this process, until it parses its flags: the parser it
builds is caught there, read, and the tool stops before it does anything.
"""
import argparse
import runpy
import sys
from pathlib import Path

import pytest

TOOLS = sorted(p for p in (Path(__file__).resolve().parents[2] / "tools").glob("*.py") if not p.name.startswith("_"))
# imported by tools, with no flags of their own: run alone, each defines its functions and does nothing
LIBRARIES = {"benchlib.py", "bench_clock.py", "bench_codec_cases.py", "bench_embedding_bag_cases.py",
             "bench_interaction_cases.py", "bench_mlp_cases.py", "bench_shape.py", "bench_shaped_ops.py",
             "bench_store_beyond_ram.py", "bench_store_stream.py", "bench_train_torch.py", "bench_train_torchrec.py",
             "bench_unique_cases.py", "fuzz_subjects.py", "gemm_floor.py"}


class Caught(BaseException):
    """Raised where a tool parses its flags; a BaseException, so that no tool's error handling swallows it."""

    def __init__(self, parser):
        self.parser = parser


def caught_parser(path, monkeypatch):
    """The ArgumentParser that ``path``'s main builds (a parser without -h, read ahead of it, is let through), or
    None where it ran to its end without parsing flags."""
    def parse(self, args=None, namespace=None):
        if self.add_help:
            raise Caught(self)
        return original(self, args, namespace)
    original = argparse.ArgumentParser.parse_known_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    monkeypatch.syspath_prepend(str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except Caught as c:
        return c.parser
    except SystemExit as e:
        pytest.fail(f"{path.name} exited ({e.code}) before parsing its flags")
    return None


@pytest.mark.parametrize("path", [p for p in TOOLS if p.name not in LIBRARIES], ids=lambda p: p.name)
def test_every_flag_has_help(path, monkeypatch):
    parser = caught_parser(path, monkeypatch)
    assert parser is not None, f"{path.name} ran without parsing flags: give it argparse, so that --help works"
    bare = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
            if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not bare, f"{path.name}: {', '.join(bare)} have no help"
    assert parser.description and parser.description.rstrip().endswith((".", ")")), \
        f"{path.name}: its description stops mid-sentence: {parser.description!r}"


@pytest.mark.parametrize("path", [p for p in TOOLS if p.name in LIBRARIES], ids=lambda p: p.name)
def test_a_library_run_alone_does_nothing(path, monkeypatch, capsys):
    # a tool filed here would escape the test above; a library that acts when run would surprise its user
    assert caught_parser(path, monkeypatch) is None, f"{path.name} parses flags: a tool, so not in LIBRARIES"
    assert capsys.readouterr() == ("", ""), f"{path.name} printed something when run alone"
