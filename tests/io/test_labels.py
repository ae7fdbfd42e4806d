"""A label is a click, 0 or 1: any other (-1, 2, 0.5) is a bad line in every reader, counted, reported and raised
under strict; ``ReadOptions(soft_labels=True)`` takes any label in [0, 1], and still no other."""
from contextlib import nullcontext

import numpy as np
import pytest

from gpuemb.io import criteo
from gpuemb.io.avazu import read_avazu
from gpuemb.io.batch import Batch
from gpuemb.io.census import read_census
from gpuemb.io.csv_reader import read_csv
from gpuemb.io.errors import BadLineError, BadLineWarning
from gpuemb.io.reader import ReadOptions
from gpuemb.io.textparse import BAD_LABEL, NOT_BINARY, NOT_SOFT, REASONS

# name: (its reader, the label's field, the delimiter, the lines to damage: 1-based, past any header)
FORMATS = {
    "criteo_sample.tsv": (lambda path, o: criteo.read_criteo(path, o), 0, "\t", (2, 9, 17)),
    "criteo_sample.csv": (lambda path, o: read_csv(path, ["label"], criteo.DENSE, criteo.SPARSE, kind="hex",
                                                   options=o), 0, ",", (3, 8, 30)),
    "avazu_sample.csv": (lambda path, o: read_avazu(path, options=o), 1, ",", (2, 40, 77)),
}


def damage(data, damaged, name, values):
    """A copy of sample ``name`` with the labels of its lines to damage set to ``values``; (path, lines)."""
    read, field, sep, lines = FORMATS[name]
    text = (data / name).read_text().split("\n")
    edits = {}
    for n, v in zip(lines, values):
        fields = text[n - 1].split(sep)
        fields[field] = v
        edits[n] = sep.join(fields)
    return damaged(name, edits), lines


def read(name, path, options=ReadOptions()):
    reader = FORMATS[name][0](path, options)
    with pytest.warns(BadLineWarning) if options.max_reported and not options.strict else nullcontext():
        batch = Batch.concat(list(reader))
    return batch, reader.report


@pytest.mark.parametrize("name", FORMATS)
def test_a_label_other_than_0_or_1_is_a_bad_line(data, damaged, name):
    path, lines = damage(data, damaged, name, ("-1", "2", "0.5"))
    batch, report = read(name, path)
    good, _ = read(name, data / name, ReadOptions(max_reported=0))
    header = name != "criteo_sample.tsv"
    kept = np.delete(np.arange(good.rows), [n - 1 - header for n in lines])
    for a, b in zip(batch.arrays(), good.take(kept).arrays()):
        np.testing.assert_array_equal(a, b)
    assert report.bad == 3 and report.reasons == {REASONS[NOT_BINARY]: 3}
    field = FORMATS[name][1] + 1
    assert [str(b) for b in report.first_bad] == [
        f"{path}:{n}: field {field} ({'click' if 'avazu' in name else 'label'}): {REASONS[NOT_BINARY]}: {v!r}"
        for n, v in zip(lines, ("-1", "2", "0.5"))]


@pytest.mark.parametrize("name", FORMATS)
def test_strict_stops_at_the_first_bad_label(data, damaged, name):
    path, lines = damage(data, damaged, name, ("1", "2", "-1"))
    with pytest.raises(BadLineError, match=f":{lines[1]}: field .*label is not 0 or 1") as e:
        read(name, path, ReadOptions(strict=True, max_reported=0))
    assert "\n" not in str(e.value) and "soft_labels" in str(e.value)


@pytest.mark.parametrize("name", FORMATS)
def test_soft_labels_take_0_to_1_and_nothing_else(data, damaged, name):
    path, lines = damage(data, damaged, name, ("0.5", "-1", "nan"))
    batch, report = read(name, path, ReadOptions(soft_labels=True))
    good, _ = read(name, data / name, ReadOptions(max_reported=0))
    header = name != "criteo_sample.tsv"
    kept = np.delete(np.arange(good.rows), [n - 1 - header for n in lines[1:]])
    want = good.label.copy()
    want[lines[0] - 1 - header] = 0.5
    np.testing.assert_array_equal(batch.label, want[kept])
    np.testing.assert_array_equal(batch.sparse, good.sparse[kept])
    assert report.reasons == {REASONS[NOT_SOFT]: 1, REASONS[BAD_LABEL]: 1}


def test_census_labels_are_0_or_1_by_construction(data):
    """Census's labels compare a field with its positive token, so whatever the field says, they are 0 or 1."""
    batch = Batch.concat(list(read_census(data / "census_income_sample.csv")))
    assert set(np.unique(batch.label)) == {0.0, 1.0}


def test_parquet_labels_follow_the_same_rule(tmp_path, rng):
    pa = pytest.importorskip("pyarrow", reason="the Parquet reader needs pyarrow (pip install -e '.[parquet]')")
    pq = pytest.importorskip("pyarrow.parquet")
    from gpuemb.io.formats import schema_for
    from gpuemb.io.parquet import ParquetReader

    n = 60
    y = rng.integers(0, 2, n).astype(float)
    bad = {7: -1.0, 19: 2.0, 33: 0.5, 50: float("nan")}
    y[list(bad)] = list(bad.values())
    ids = rng.integers(-2 ** 40, 2 ** 40, n)
    text = [str(float(v)) for v in y]  # the same labels in a string column, which the text reader's parser reads
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"y": pa.array(y), "t": pa.array(text), "i": pa.array(ids)}), path, row_group_size=16)
    for label in ("y", "t"):
        schema = schema_for("parquet", [path], label=[label], categorical=["i"])
        for soft, dropped in ((False, [7, 19, 33, 50]), (True, [7, 19, 50])):
            reader = ParquetReader(path, schema, ReadOptions(soft_labels=soft, max_reported=0))
            batch = Batch.concat(list(reader))
            keep = np.delete(np.arange(n), dropped)
            np.testing.assert_array_equal(batch.label, y[keep].astype(np.float32))
            want = {REASONS[NOT_SOFT if soft else NOT_BINARY]: 2 + (not soft), REASONS[BAD_LABEL]: 1}
            assert reader.report.reasons == want, (label, soft)
    ints = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"y": pa.array([0, 1, 2, -1, 1], pa.int8()), "i": pa.array([1, 2, 3, 4, 5])}), ints)
    reader = ParquetReader(ints, schema_for("parquet", [ints], label=["y"], categorical=["i"]),
                           ReadOptions(max_reported=0))
    np.testing.assert_array_equal(Batch.concat(list(reader)).label, [0, 1, 1])
    assert reader.report.reasons == {REASONS[NOT_BINARY]: 2}


def test_soft_labels_must_be_a_bool():
    with pytest.raises(ValueError, match="ReadOptions.soft_labels='yes'; give True"):
        ReadOptions(soft_labels="yes").validate()
