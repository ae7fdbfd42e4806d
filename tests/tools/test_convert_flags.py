"""tools/convert.py refuses bad flags in one line that names them, with exit code 2 and no traceback, before it
reads or writes anything (issue 29's list of flags that gave tracebacks)."""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "convert.py"


@pytest.fixture(scope="module")
def convert():
    spec = importlib.util.spec_from_file_location("convert_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def criteo_file(tmp_path, rows=40):
    """A small Criteo TSV of fresh lines: label, 13 dense, 26 hex ids."""
    rng = np.random.default_rng(rows)
    lines = []
    for _ in range(rows):
        dense = [str(v) for v in rng.integers(0, 100, 13)]
        sparse = [f"{v:08x}" for v in rng.integers(0, 2 ** 31, 26)]
        lines.append("\t".join([str(rng.integers(0, 2))] + dense + sparse))
    path = tmp_path / "day.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD = {
    "shard below chunk": (["--rows-per-shard", "10", "--chunk-rows", "100"],
                          "--rows-per-shard 10: .*multiple of --chunk-rows \\(100\\)"),
    "no chunk": (["--chunk-rows", "0"], "--chunk-rows 0: give a positive number"),
    "split over one": (["--split", "0.5", "0.5", "0.5"], "--split 0.5 0.5 0.5: give three ratios >= 0 .* sum to 1"),
    "split nan": (["--split", "nan", "0", "0"], "--split nan 0.0 0.0: give three ratios"),
    "negative cap": (["--cap", "-1"], "--cap -1: a cap is a row count >= 0"),
    "negative threshold": (["--freq-threshold", "-1"], "--freq-threshold -1: give a count >= 0"),
    "negative bag": (["--max-bag", "-3"], "--max-bag -3: give the most ids a bag keeps"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_flag_is_one_line_and_exit_2(convert, tmp_path, capsys, case):
    flags, message = BAD[case]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        convert.main(["criteo", str(criteo_file(tmp_path)), "--out", str(out), *flags])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert re.search(message, err[-1]), err[-1]
    assert not out.exists()  # nothing written


def test_synthetic_rows_must_be_positive(convert, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        convert.main(["synthetic", "--rows", "0", "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert "--rows 0 --test-rows 100000: give at least one training row" in capsys.readouterr().err


def test_a_cap_count_that_fits_no_column_count_is_one_line_and_exit_2(convert, tmp_path, capsys):
    code = convert.main(["criteo", str(criteo_file(tmp_path)), "--out", str(tmp_path / "out"), "--cap", "5", "6", "7"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith("convert.py: caps=(5, 6, 7): give one cap >= 0 per sparse column (26)")


def test_good_flags_still_convert(convert, tmp_path, capsys):
    code = convert.main(["criteo", str(criteo_file(tmp_path)), "--out", str(tmp_path / "out"), "--split", "0.5",
                         "0.25", "0.25", "--chunk-rows", "8", "--rows-per-shard", "16", "--cap", "1000"])
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["test", "train", "val"]


def test_converting_again_into_a_used_out_is_one_line_and_overwrite_replaces_it(convert, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--out", str(out), "--chunk-rows", "8", "--rows-per-shard", "16"]
    assert convert.main(["criteo", str(criteo_file(tmp_path, 60)), "--split", "0.5", "0.5", "0", *args]) == 0
    capsys.readouterr()
    assert convert.main(["criteo", str(criteo_file(tmp_path, 20)), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"convert.py: {out}: holds an earlier conversion (") and len(err.splitlines()) == 1
    assert "give --overwrite to replace that data set" in err and "Traceback" not in err
    assert convert.main(["criteo", str(criteo_file(tmp_path, 20)), *args, "--split", "1", "0", "0", "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["train"]  # the first's val split went with it
    assert sorted(p.name for p in (out / "train").iterdir()) == ["manifest.json", "part-00000.h5", "part-00001.h5"]
    assert convert.main(["synthetic", "--rows", "40", "--test-rows", "0", *args]) == 1
    assert "holds an earlier conversion" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--split", "--seed", "--freq-threshold", "--rows-per-shard", "--preset", "--rows",
                                  "--overwrite"])
def test_each_flag_has_help(convert, capsys, flag):
    with pytest.raises(SystemExit):
        convert.main(["--help"])
    text = capsys.readouterr().out
    entry = re.search(f"^  {flag}( .*?)(?=^  -|^\\S|\\Z)", text + "\n", re.M | re.S).group(1)
    said = re.sub(r"^(\s*([A-Z_]+|\{[^}]*\}))*", "", entry).strip()  # less the metavar
    assert len(said) > 20, entry


def test_soft_labels_keep_labels_between_0_and_1_that_are_bad_lines_without_it(convert, tmp_path, capsys):
    source = criteo_file(tmp_path, 40)
    lines = source.read_text().splitlines()
    rng = np.random.default_rng(3)
    soft = rng.choice(len(lines), 10, replace=False)
    for i in soft:
        lines[i] = f"{rng.uniform(0.05, 0.95):.3f}" + lines[i][1:]
    source.write_text("\n".join(lines) + "\n")
    args = [str(source), "--split", "1", "0", "0", "--chunk-rows", "8", "--rows-per-shard", "16"]
    assert convert.main(["criteo", *args, "--out", str(tmp_path / "hard")]) == 0
    assert "train: 30 rows" in capsys.readouterr().out  # the 10 soft labels were bad lines
    assert convert.main(["criteo", *args, "--out", str(tmp_path / "soft"), "--soft-labels"]) == 0
    assert "train: 40 rows" in capsys.readouterr().out
    from gpuemb.io.shards import ShardSource
    with ShardSource(str(tmp_path / "soft" / "train")) as src:
        labels = np.concatenate([src.read_block(i).label for i in range(len(src.blocks))])
    want = np.array([float(line.split("\t")[0]) for line in lines], np.float32)
    np.testing.assert_array_equal(labels, want)
