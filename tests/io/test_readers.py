"""Readers on the real samples: values against a plain-Python reading of the same text."""
import csv
import gzip

import numpy as np
import pytest

from gpuemb.io import criteo
from gpuemb.io.avazu import read_avazu
from gpuemb.io.batch import Batch
from gpuemb.io.census import census_schema, read_census
from gpuemb.io.criteo import criteo_schema, read_criteo
from gpuemb.io.csv_reader import read_csv
from gpuemb.io.hashing import missing_id, token_id
from gpuemb.io.reader import ReadOptions, TextReader


def read_all(reader):
    return Batch.concat(list(reader))


def test_criteo_tsv_matches_a_python_reading(data):
    b = read_all(read_criteo(data / "criteo_sample.tsv"))
    rows = [line.split("\t") for line in (data / "criteo_sample.tsv").read_text().splitlines()]
    assert b.rows == len(rows) == 200
    np.testing.assert_array_equal(b.label, [float(r[0]) for r in rows])
    want_dense = [[np.log1p(max(float(v), 0.0)) if v else 0.0 for v in r[1:14]] for r in rows]
    np.testing.assert_allclose(b.dense, want_dense, rtol=1e-6)
    want_sparse = [[token_id(v, c, "hex") for c, v in enumerate(r[14:])] for r in rows]
    np.testing.assert_array_equal(b.sparse, want_sparse)
    assert (b.dense > 0).any() and (b.sparse == missing_id(19)).any()  # the sample has values and gaps


def test_criteo_csv_reads_the_same_arrays_as_the_tsv(data):
    tsv = read_all(read_criteo(data / "criteo_sample.tsv"))
    csv_ = read_all(read_csv(data / "criteo_sample.csv", ["label"], criteo.DENSE, criteo.SPARSE, kind="hex"))
    for a, b in zip(tsv.arrays(), csv_.arrays()):
        np.testing.assert_array_equal(a, b)


def test_small_blocks_gzip_and_crlf_give_the_same_rows(data, tmp_path):
    whole = read_all(read_criteo(data / "criteo_sample.tsv"))
    gz = tmp_path / "sample.tsv.gz"
    gz.write_bytes(gzip.compress((data / "criteo_sample.tsv").read_bytes()))
    crlf = tmp_path / "sample_crlf.tsv"
    crlf.write_bytes((data / "criteo_sample.tsv").read_bytes().replace(b"\n", b"\r\n"))
    for path in (gz, crlf):
        reader = TextReader(path, criteo_schema(), ReadOptions(block_bytes=1024))
        parts = list(reader)
        assert len(parts) > 10  # really read in many blocks
        for a, b in zip(whole.arrays(), Batch.concat(parts).arrays()):
            np.testing.assert_array_equal(a, b)


def test_avazu_ids_past_int64_are_kept_hashed_from_their_digits(data):
    b = read_all(read_avazu(data / "avazu_sample.csv", keep_id=True))
    with open(data / "avazu_sample.csv") as f:
        rows = list(csv.DictReader(f))
    ids = [r["id"] for r in rows]
    assert any(int(i) >= 2 ** 63 for i in ids) and b.rows == 100  # none of them is a bad line
    np.testing.assert_array_equal(b.sparse[:, 0], [token_id(i, 0) for i in ids])
    np.testing.assert_array_equal(b.label, [float(r["click"]) for r in rows])
    np.testing.assert_array_equal(b.sparse[:, 2], [token_id(r["C1"], 2) for r in rows])
    assert read_all(read_avazu(data / "avazu_sample.csv")).sparse.shape == (100, 22)


def test_census_has_two_tasks_and_keeps_leading_spaces(data):
    b = read_all(read_census(data / "census_income_sample.csv"))
    rows = [line.split(",") for line in (data / "census_income_sample.csv").read_text().splitlines()]
    assert b.label.shape == (200, 2)
    np.testing.assert_array_equal(b.label[:, 0], [r[8] == " Never married" for r in rows])
    np.testing.assert_array_equal(b.label[:, 1], [r[42] == " 50000+." for r in rows])
    assert 0 < b.label[:, 0].sum() < 200 and 0 < b.label[:, 1].sum() < 200
    s = census_schema()
    c = s.sparse_names.index("education")
    np.testing.assert_array_equal(b.sparse[:, c], [token_id(r[5], c) for r in rows])
    assert rows[0][5].startswith(" ")
    np.testing.assert_allclose(b.dense[:, s.dense_names.index("age")], [np.log1p(float(r[1])) for r in rows],
                               rtol=1e-6)


@pytest.mark.parametrize("text,value", [("260", 260.0), ("260.0", 260.0), ("-1", -1.0), ("1819.08", 1819.08),
                                        ("1e3", 1000.0), ("+2.5E-1", 0.25)])
def test_numbers_parse_like_python(tmp_path, text, value):
    path = tmp_path / "n.csv"
    path.write_text(f"y,x\n1,{text}\n")
    b = read_all(read_csv(path, ["y"], ["x"], options=ReadOptions(dense_log1p=False)))
    assert b.dense[0, 0] == np.float32(value)
