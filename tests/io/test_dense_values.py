"""Numbers in text: values past float32 (1e400, a 10-million-digit count, spelled-out nan/inf) make the line bad in
every format, long digit strings parse right and in linear time, and the parser agrees with Python's float."""
import warnings

import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.census import read_census
from gpuemb.io.convert import convert
from gpuemb.io.criteo import criteo_schema, read_criteo
from gpuemb.io.csv_reader import read_csv
from gpuemb.io.errors import BadLineError
from gpuemb.io.reader import ReadOptions
from gpuemb.io.shards import ShardSource
from gpuemb.io.textparse import parse_number

HUGE = "9" * 10_000_000
# name, delimiter, index of a dense field, a reader of the file
FORMATS = {
    "criteo_sample.tsv": ("\t", 1, lambda p, o: read_criteo(p, o)),
    "criteo_sample.csv": (",", 1, lambda p, o: read_csv(p, ["label"], ["I1", "I2"], ["C1"], kind="hex", options=o)),
    "census_income_sample.csv": (",", 1, lambda p, o: read_census(p, o)),
}


def replace_field(data, tmp_path, name, line, value):
    """A copy of sample ``name`` whose dense field on ``line`` (1-based) is ``value``."""
    delim, index, _ = FORMATS[name]
    lines = (data / name).read_text().split("\n")
    fields = lines[line - 1].split(delim)
    fields[index] = value
    lines[line - 1] = delim.join(fields)
    path = tmp_path / name
    path.write_text("\n".join(lines))
    return path


def read_all(name, path, options=ReadOptions()):
    reader = FORMATS[name][2](path, options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = Batch.concat(list(reader))
    return batch, reader.report, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("value, why", [(v, "out of float32 range") for v in ("1e400", "-1e400", "3.5e38", HUGE)]
                         + [(v, "not a number") for v in ("nan", "inf", "-Infinity")])
@pytest.mark.parametrize("log1p", [True, False])
def test_a_dense_value_past_float32_makes_the_line_bad(data, tmp_path, name, value, why, log1p):
    path = replace_field(data, tmp_path, name, 4, value)
    good, _, _ = read_all(name, data / name, ReadOptions(dense_log1p=log1p))
    batch, report, warned = read_all(name, path, ReadOptions(dense_log1p=log1p))
    assert report.bad == 1 and batch.rows == good.rows - 1
    assert np.isfinite(batch.dense).all()
    np.testing.assert_array_equal(batch.dense, np.delete(good.dense, 4 - 1 - ("criteo_sample.csv" == name), 0))
    assert len(warned) == 1 and warned[0].startswith(f"{path}:4: field 2 (") and why in warned[0]
    with pytest.raises(BadLineError, match=f"{path}:4: field 2 .*{why}"):
        read_all(name, path, ReadOptions(strict=True))


def test_a_label_past_float32_makes_the_line_bad(data, tmp_path):
    lines = (data / "criteo_sample.tsv").read_text().split("\n")
    lines[6] = "1e39" + lines[6][1:]
    path = tmp_path / "label.tsv"
    path.write_text("\n".join(lines))
    batch, report, warned = read_all("criteo_sample.tsv", path)
    assert batch.rows == 199 and np.isfinite(batch.label).all()
    assert warned == [f"{path}:7: field 1 (label): number is out of float32 range (|x| > 3.4e38): '1e39'"]


def test_the_converter_skips_and_reports_an_overflowing_line(data, tmp_path):
    path = replace_field(data, tmp_path, "criteo_sample.tsv", 12, "1" + "0" * 400)
    with pytest.warns(UserWarning, match=":12: field 2 \\(I1\\): number is out of float32 range"):
        report = convert([path], tmp_path / "out", criteo_schema())
    assert report.rows == {"train": 199} and report.parse.bad == 1
    assert f"first: {path}:12: field 2 (I1)" in report.parse.summary()
    with ShardSource(report.paths["train"]) as src:
        assert np.isfinite(src.read_block(0).dense).all()


@pytest.mark.parametrize("text, value", [("1." + "0" * 1_000_000, 1.0), ("0" * 1_000_000 + "42", 42.0),
                                         ("0." + "0" * 1000 + "1", 0.0), ("0e99999", 0.0),
                                         ("12345678901234567890123e-3", 1.2345678901234568e19),
                                         ("-0.000" + "9" * 500, -0.001)])
def test_long_digit_strings_parse_to_their_value(text, value):
    v, ok = parse_number(np.frombuffer(text.encode(), np.uint8), 0, len(text))
    assert ok and v == pytest.approx(value, rel=1e-15, abs=0)


def test_parse_number_agrees_with_python_float_on_random_decimals():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 40))))
        point = rng.integers(0, len(digits) + 1)
        text = ("-" if rng.random() < 0.3 else "") + digits[:point] + "." + digits[point:]
        if rng.random() < 0.5:
            text += f"e{rng.integers(-300, 300)}"
        v, ok = parse_number(np.frombuffer(text.encode(), np.uint8), 0, len(text))
        assert ok and v == pytest.approx(float(text), rel=1e-14, abs=1e-300), text


def test_a_line_longer_than_many_blocks_is_read_whole(data, tmp_path):
    # 30M digits in 4 KiB blocks: the line's pieces are joined once its end comes (each block used to re-copy the
    # whole line so far, which took seconds; a timing is for a benchmark, so this holds the result only)
    path = replace_field(data, tmp_path, "criteo_sample.tsv", 3, "9" * 30_000_000)
    batch, report, warned = read_all("criteo_sample.tsv", path, ReadOptions(block_bytes=4096))
    assert batch.rows == 199 and report.bad == 1
    assert warned == [f"{path}:3: field 2 (I1): number is out of float32 range (|x| > 3.4e38): '{'9' * 37}...'"]
