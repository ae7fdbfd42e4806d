"""tools/fuzz_files.py: each outcome is told apart on readers made to show it, and a short run over real kinds of
file ends with none of the bad ones (the long run's figures are in docs/perf/README.md)."""
import os
import sys
import time
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import fuzz_files  # noqa: E402
from fuzz_subjects import Subject  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzzer reads in forked children")


class Refused(ValueError):
    pass


def checked(folder):
    """A reader of a file that carries its CRC32 in its first line: what gpuemb's formats do."""
    with open(os.path.join(folder, "f.bin"), "rb") as f:
        crc, body = f.read().split(b"\n", 1)
    if not crc.isdigit() or int(crc) != zlib.crc32(body):
        raise Refused("checksum")
    return body.hex()


def unchecked(folder):
    with open(os.path.join(folder, "f.bin"), "rb") as f:
        return f.read().hex()


def slow(folder):
    if unchecked(folder) != PRISTINE.hex():
        time.sleep(30)
    return unchecked(folder)


def crashes(folder):
    if unchecked(folder) != PRISTINE.hex():
        os.abort()
    return unchecked(folder)


def raises(folder):
    if unchecked(folder) != PRISTINE.hex():
        raise KeyError("crc32")
    return unchecked(folder)


BODY = os.urandom(3000)
PRISTINE = str(zlib.crc32(BODY)).encode() + b"\n" + BODY


@pytest.mark.parametrize("read, checked_format, want", [
    (checked, True, {"refused"}),
    (unchecked, True, {"silent difference"}),
    (unchecked, False, {"edited"}),
    (slow, True, {"hang"}),
    (crashes, True, {"crash"}),
    (raises, True, {"traceback"})])
def test_each_outcome_is_told_apart(tmp_path, read, checked_format, want):
    (tmp_path / "f.bin").write_bytes(PRISTINE)
    subject = Subject("test", ("f.bin",), read, (Refused,), checked=checked_format)
    counts, cases = fuzz_files.fuzz(subject, str(tmp_path), 6, seed=1, timeout=1.0, examples=2)
    seen = {o for o, n in counts.items() if n}
    # a mutation may change nothing the reader sees (extend of an unchecked file always does): identical is fine
    assert want <= seen <= want | {"identical"}, counts
    assert (tmp_path / "f.bin").read_bytes() == PRISTINE  # every mutation was undone
    assert all(c["outcome"] in want for c in cases) and len(cases) <= 2 * len(want)


def test_a_short_run_over_real_files_has_no_bad_outcome(tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    code = fuzz_files.main(["--mutations", "60", "--kinds", "snapshot,shards,config-json", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "60 mutations" in printed and "0 bad" in printed
    import json
    total = json.loads(out.read_text())["total"]
    assert sum(total.values()) == 60 and total["refused"] > 0 and not any(total[o] for o in fuzz_files.BAD)


def test_an_unknown_kind_is_one_line_and_exit_code_2(capsys):
    assert fuzz_files.main(["--kinds", "snapshots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown ['snapshots']" in err[0]
