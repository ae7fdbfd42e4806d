"""The Parquet reader: random tables written with pyarrow against a reference built from the same Python values
(ids through gpuemb.io.hashing's public functions), the ids a CSV file gives, bad rows by row group and row,
damaged files, the schema from the file's types, and reading one row group at a time."""
import sys
import warnings

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="the Parquet reader needs pyarrow (pip install -e '.[parquet]')")
pq = pytest.importorskip("pyarrow.parquet")

from gpuemb.io.batch import Batch  # noqa: E402
from gpuemb.io.csv_reader import csv_schema  # noqa: E402
from gpuemb.io.errors import BadLineError, BadLineWarning, DataError, SchemaError  # noqa: E402
from gpuemb.io.formats import FORMATS, reader_for, schema_for  # noqa: E402
from gpuemb.io.hashing import token_id  # noqa: E402
from gpuemb.io.parquet import ParquetReader  # noqa: E402
from gpuemb.io.reader import ReadOptions, TextReader  # noqa: E402
from gpuemb.io.textparse import BAD_INT, REASONS  # noqa: E402

# The categorical columns in file order, which is the schema's (their hashing slot is the index here), and how
# each is hashed.
CATEGORICAL = (("c_str", "str"), ("tags", "int"), ("c_int", "int"), ("words", "str"))
DENSE = ("d_f", "d_i")


def _maybe(rng, value, p):
    return None if rng.random() < p else value


def random_columns(rng, n):
    """Python values of every column: nulls, NaN, empty strings, empty and null lists, null list elements."""
    vocab = ["a", "b", "ü", "", "long token with spaces"]
    return {
        "y": [_maybe(rng, float(rng.integers(0, 2)), 0.05) for _ in range(n)],
        "d_f": [_maybe(rng, float("nan") if rng.random() < 0.05 else float(rng.normal(0, 10)), 0.1)
                for _ in range(n)],
        "d_i": [_maybe(rng, int(rng.integers(-5, 1000)), 0.1) for _ in range(n)],
        "c_str": [_maybe(rng, str(rng.choice(vocab)), 0.1) for _ in range(n)],
        "tags": [_maybe(rng, [_maybe(rng, int(rng.integers(-50, 50)), 0.1) for _ in range(rng.integers(0, 6))], 0.1)
                 for _ in range(n)],
        "c_int": [_maybe(rng, int(rng.integers(-(1 << 62), 1 << 62)), 0.1) for _ in range(n)],
        "words": [_maybe(rng, [_maybe(rng, str(rng.choice(vocab)), 0.1) for _ in range(rng.integers(0, 5))], 0.1)
                  for _ in range(n)],
        "unused": [float(i) for i in range(n)],
    }


TYPES = {"y": pa.float64(), "d_f": pa.float64(), "d_i": pa.int32(), "c_str": pa.string(), "c_int": pa.int64(),
         "tags": pa.list_(pa.int64()), "words": pa.large_list(pa.string()), "unused": pa.float64()}


def write(path, columns, types=TYPES, row_group_size=64):
    table = pa.table({k: pa.array(v, types[k]) for k, v in columns.items()})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def schema_of(path, **names):
    names = {"label": ["y"], "dense": list(DENSE), "categorical": [c for c, _ in CATEGORICAL], **names}
    return schema_for("parquet", [path], **names)


def reference(columns, log1p=True):
    """The Batch of the good rows (label not null) built from the Python values alone: dense as the text reader
    treats a number (null and NaN are missing: 0), every token through hashing.token_id, an int as its digits
    would be in a CSV column of kind int, null list elements left out."""
    good = [i for i, y in enumerate(columns["y"]) if y is not None]

    def dense_value(v):
        if v is None or v != v:
            return 0.0
        return np.log1p(max(v, 0.0)) if log1p else v

    def token(v, slot, kind):
        return token_id(None if v is None else str(v), slot, kind)

    label = np.array([columns["y"][i] for i in good], np.float32)
    dense = np.array([[dense_value(columns[c][i]) for c in DENSE] for i in good], np.float32).reshape(-1, len(DENSE))
    sparse = np.array([[token(columns[c][i], s, k) for s, (c, k) in enumerate(CATEGORICAL) if c.startswith("c_")]
                       for i in good], np.int64)
    bags = [[[token(v, s, k) for v in (columns[c][i] or []) if v is not None]
             for s, (c, k) in enumerate(CATEGORICAL) if not c.startswith("c_")] for i in good]
    lengths = np.array([[len(b) for b in row] for row in bags], np.int32)
    values = np.array([v for row in bags for b in row for v in b], np.int64)
    return label, dense, sparse, lengths, values


def read_all(reader):
    return Batch.concat(list(reader))


def assert_matches(batch, ref):
    label, dense, sparse, lengths, values = ref
    np.testing.assert_array_equal(batch.label, label)
    np.testing.assert_allclose(batch.dense, dense, rtol=1e-6)
    np.testing.assert_array_equal(batch.sparse, sparse)
    np.testing.assert_array_equal(batch.bags.lengths, lengths)
    np.testing.assert_array_equal(batch.bags.values, values)


@pytest.mark.parametrize("log1p", [True, False])
def test_values_match_a_reference_built_from_the_python_values(tmp_path, rng, log1p):
    columns = random_columns(rng, 500)
    path = write(tmp_path / "x.parquet", columns)
    schema = schema_of(path)
    assert schema.sparse_hotness == (1, 0, 1, 0) and schema.reader == "parquet"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadLineWarning)
        reader = ParquetReader(path, schema, ReadOptions(dense_log1p=log1p), batch_rows=50)
        batches = list(reader)
    assert len(batches) == 8 * 2  # 8 row groups of up to 64 rows, each in two batches of at most 50
    assert_matches(Batch.concat(batches), reference(columns, log1p))
    nulls = sum(y is None for y in columns["y"])
    assert nulls and reader.report.bad == nulls and reader.report.rows == 500 - nulls
    assert reader.report.reasons == {"label is null": nulls}


def test_several_files_read_in_order_as_one(tmp_path, rng):
    a, b = random_columns(rng, 100), random_columns(rng, 70)
    paths = [write(tmp_path / "a.parquet", a), write(tmp_path / "b.parquet", b, row_group_size=30)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadLineWarning)
        batch = read_all(reader_for(paths, schema_of(paths[0]), ReadOptions()))
    both = {k: a[k] + b[k] for k in a}
    assert_matches(batch, reference(both))


def test_a_token_gets_the_same_id_from_csv_and_parquet(tmp_path, rng):
    n = 300
    rows = [(int(rng.integers(0, 2)), float(rng.integers(0, 10**6)) / 100, str(rng.choice(["x", "yy", "", "zz z"])),
             int(rng.integers(-(1 << 40), 1 << 40))) for _ in range(n)]
    csv = tmp_path / "x.csv"
    csv.write_text("y,d,s,i\n" + "".join(f"{y},{d!r},{s},{i}\n" for y, d, s, i in rows))
    parquet = write(tmp_path / "x.parquet", {k: list(v) for k, v in zip("ydsi", zip(*rows))},
                    {"y": pa.int8(), "d": pa.float64(), "s": pa.string(), "i": pa.int64()}, row_group_size=100)
    names = dict(label=["y"], dense=["d"], categorical=["s", "i"])
    text = read_all(TextReader(csv, csv_schema(csv, **names, kind={"s": "str", "i": "int"})))
    arrow = read_all(ParquetReader(parquet, schema_for("parquet", [parquet], **names)))
    for a, b in zip(text.arrays(), arrow.arrays()):
        np.testing.assert_array_equal(a, b)
    assert arrow.bags is None and arrow.rows == n


def test_null_lists_are_empty_bags_and_null_elements_are_skipped(tmp_path):
    path = write(tmp_path / "x.parquet", {"y": [1.0, 0.0, 1.0, 0.0], "tags": [[1, None, 2], None, [], [None]],
                                          "words": [[""], ["a", None], None, []]})
    batch = read_all(ParquetReader(path, schema_for("parquet", [path], label=["y"], categorical=["tags", "words"])))
    np.testing.assert_array_equal(batch.bags.lengths, [[2, 1], [0, 1], [0, 0], [0, 0]])
    # an empty string is a token (the missing id, as an empty CSV field), a null element is no token
    np.testing.assert_array_equal(batch.bags.values, [token_id("1", 0, "int"), token_id("2", 0, "int"),
                                                      token_id("", 1), token_id("a", 1)])


def test_numbers_in_text_columns_parse_as_the_text_reader_parses_them(tmp_path):
    label = ["1", "1e0", "", None, "x", "1e400", "1", "1", "0"]
    dense = ["2", "", "9", "9", "9", "9", "abc", None, "1e40"]
    path = write(tmp_path / "x.parquet", {"y": label, "d": dense}, {"y": pa.string(), "d": pa.large_string()})
    reader = ParquetReader(path, schema_for("parquet", [path], label=["y"], dense=["d"]),
                           ReadOptions(dense_log1p=False, max_reported=0))
    batch = read_all(reader)
    np.testing.assert_array_equal(batch.label, [1, 1, 1])
    np.testing.assert_array_equal(batch.dense[:, 0], [2, 0, 0])  # an empty string and a null are missing
    assert reader.report.reasons == {"label is not a number": 2, "label is null": 1,
                                     "number is out of float32 range (|x| > 3.4e38)": 2,
                                     "dense value is not a number": 1}


def _bad_file(tmp_path):
    """12 rows in row groups of 4: a bag of 5 keys at row 2, a null label at row 5, a bad int token at row 10."""
    columns = {"y": [1.0] * 12, "tags": [[1]] * 12, "code": ["7"] * 12}
    columns["tags"][2] = [1, 2, 3, None, 4, 5]
    columns["y"][5] = None
    columns["code"][10] = "12x"
    path = write(tmp_path / "bad.parquet", columns, {"y": pa.float32(), "tags": pa.list_(pa.int32()),
                                                     "code": pa.string()}, row_group_size=4)
    return path, schema_for("parquet", [path], label=["y"], categorical=["tags", "code"], kind="int")


def test_bad_rows_are_skipped_and_named_by_file_row_group_and_row(tmp_path):
    path, schema = _bad_file(tmp_path)
    with pytest.warns(BadLineWarning) as warned:
        reader = ParquetReader(path, schema, max_bag=4)
        batch = read_all(reader)
    assert batch.rows == 9 and reader.report.rows == 9 and reader.report.bad == 3
    assert [str(b) for b in reader.report.first_bad] == [
        f"{path}: row group 0, row 2 (file row 2): column 'tags': a bag of 5 keys, more than max_bag=4; raise the "
        "cap (--max-bag), or truncate the bag when the data is made",
        f"{path}: row group 1, row 1 (file row 5): column 'y': label is null",
        f"{path}: row group 2, row 2 (file row 10): column 'code': bad integer token (kind int takes int64s, -2**63 to "
        "2**63-1; read others as kind str): '12x'"]
    assert len(warned) == 3
    assert "12x" in reader.report.summary() or "row group 0, row 2" in reader.report.summary()


def test_an_integer_outside_int64_is_a_bad_row_as_its_digits_are_in_a_csv(tmp_path, rng):
    """A uint64 column's values past 2**63-1, and a text column's int tokens past int64, are bad rows: as uint64
    bits, 2**64-1 would be the id of -1."""
    n = 40
    u = [int(v) for v in rng.integers(0, 2 ** 63 - 1, n, endpoint=True)]
    u[3], u[10], u[20] = 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1
    t = [str(v) for v in rng.integers(-2 ** 63, 2 ** 63 - 1, n, endpoint=True)]
    t[5], t[30] = str(-2 ** 63), str(-2 ** 63 - 1)
    y = [int(v) for v in rng.integers(0, 2, n)]
    path = write(tmp_path / "x.parquet", {"y": y, "u": u, "t": t}, {"y": pa.int8(), "u": pa.uint64(),
                                                                    "t": pa.string()}, row_group_size=16)
    reader = ParquetReader(path, schema_for("parquet", [path], label=["y"], categorical=["u", "t"], kind="int"),
                           ReadOptions(max_reported=0))
    batch = read_all(reader)
    keep = np.delete(np.arange(n), [10, 20, 30])
    assert reader.report.reasons == {REASONS[BAD_INT]: 3}
    np.testing.assert_array_equal(batch.sparse, [[token_id(str(u[i]), 0, "int"), token_id(t[i], 1, "int")]
                                                 for i in keep])
    np.testing.assert_array_equal(batch.label, np.array(y)[keep])


def test_without_a_cap_a_long_bag_is_kept(tmp_path):
    path, schema = _bad_file(tmp_path)
    reader = ParquetReader(path, schema, ReadOptions(max_reported=0))
    batch = read_all(reader)
    assert batch.rows == 10 and batch.bags.lengths[2, 0] == 5 and reader.report.bad == 2


def test_strict_raises_the_first_bad_row(tmp_path):
    path, schema = _bad_file(tmp_path)
    with pytest.raises(BadLineError, match=r"bad\.parquet: row group 0, row 2 \(file row 2\): column 'tags'"):
        read_all(ParquetReader(path, schema, ReadOptions(strict=True), max_bag=4))


def test_bad_rows_past_max_reported_are_counted_not_listed(tmp_path):
    path = write(tmp_path / "x.parquet", {"y": [None] * 30 + [1.0], "d": [1.0] * 31},
                 {"y": pa.float64(), "d": pa.float64()}, row_group_size=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadLineWarning)
        reader = ParquetReader(path, schema_for("parquet", [path], label=["y"], dense=["d"]),
                               ReadOptions(max_reported=3))
        assert read_all(reader).rows == 1
    assert reader.report.bad == 30 and len(reader.report.first_bad) == 3
    assert str(reader.report.first_bad[2]).startswith(f"{path}: row group 0, row 2 (file row 2)")


def _one_line_error(error, path):
    message = str(error.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    return message


def test_a_file_that_is_not_parquet_or_is_truncated_is_one_line(tmp_path, rng):
    good = write(tmp_path / "good.parquet", random_columns(rng, 200))
    data = good.read_bytes()
    cases = {"text.parquet": b"y,a\n1,2\n", "half.parquet": data[:len(data) // 2], "empty.parquet": b"",
             "tail.parquet": data[:-3]}
    schema = schema_of(good)
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        for read in (lambda: schema_of(path), lambda: read_all(ParquetReader(path, schema))):
            with pytest.raises(DataError) as e:
                read()
            assert "is not a Parquet file, or is truncated" in _one_line_error(e, path)
    with pytest.raises(DataError, match="no such file") as e:
        read_all(ParquetReader(tmp_path / "gone.parquet", schema))
    _one_line_error(e, tmp_path / "gone.parquet")


def test_a_damaged_row_group_is_one_line_naming_it(tmp_path):
    rng = np.random.default_rng(0)
    table = pa.table({"y": rng.random(4000), "tags": pa.array([list(rng.integers(0, 1 << 60, 3)) for _ in
                                                                range(4000)], pa.list_(pa.int64()))})
    path = tmp_path / "x.parquet"
    pq.write_table(table, path, row_group_size=2000, compression="snappy", use_dictionary=False)
    schema = schema_for("parquet", [path], label=["y"], categorical=["tags"])
    column = pq.ParquetFile(path).metadata.row_group(1).column(1)
    data = bytearray(path.read_bytes())
    start = column.data_page_offset + 64  # past the page header: garbage where snappy's stream is
    data[start:start + 4096] = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        read_all(ParquetReader(path, schema, ReadOptions(soft_labels=True)))  # its labels are random in [0, 1)
    assert "row group 1 cannot be read" in _one_line_error(e, path)


def test_a_flipped_bit_in_a_page_with_a_checksum_fails_its_row_group(tmp_path):
    """Uncompressed, a flipped bit still parses, as a wrong value; the page's CRC, where the writer stored one (as
    Spark's does), catches it."""
    rng = np.random.default_rng(1)
    table = pa.table({"y": rng.random(4000), "tags": pa.array([list(rng.integers(0, 1 << 60, 3)) for _ in
                                                                range(4000)], pa.list_(pa.int64()))})
    path = tmp_path / "x.parquet"
    pq.write_table(table, path, row_group_size=2000, compression="none", use_dictionary=False,
                   write_page_checksum=True)
    schema = schema_for("parquet", [path], label=["y"], categorical=["tags"])
    column = pq.ParquetFile(path).metadata.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x10  # in the values, past the header
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).read().num_rows == 4000  # unchecked, it reads, one value wrong
    with pytest.raises(DataError) as e:
        read_all(ParquetReader(path, schema, ReadOptions(soft_labels=True)))  # its labels are random in [0, 1)
    assert "row group 1 cannot be read" in _one_line_error(e, path) and "CRC" in str(e.value)


def test_the_reader_asks_pyarrow_for_one_row_group_at_a_time(tmp_path, rng, monkeypatch):
    path = write(tmp_path / "x.parquet", random_columns(rng, 1000), row_group_size=40)
    asked = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self, batch_size, row_groups=None, columns=None, **kw):
        asked.append((tuple(row_groups), tuple(columns), batch_size))
        return iter_batches(self, batch_size, row_groups=row_groups, columns=columns, **kw)

    def whole(*a, **kw):
        raise AssertionError("the reader asked pyarrow for a whole file")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    for name in ("read", "read_row_groups"):
        monkeypatch.setattr(pq.ParquetFile, name, whole)
    monkeypatch.setattr(pq, "read_table", whole)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadLineWarning)
        sizes = [b.rows for b in ParquetReader(path, schema_of(path), batch_rows=16)]
    assert [groups for groups, _, _ in asked] == [(g,) for g in range(25)]
    # only the columns the schema reads ("unused" is in the file, not in the schema's roles)
    assert all(set(columns) == {"y", *DENSE, *(c for c, _ in CATEGORICAL)} for _, columns, _ in asked)
    assert max(sizes) <= 16 and len(sizes) == 25 * 3


def test_the_schema_comes_from_the_file_s_types(tmp_path, rng):
    path = write(tmp_path / "x.parquet", random_columns(rng, 10))
    schema = schema_of(path, kind="hex")
    kinds = {c.name: (c.role, c.kind, c.hotness) for c in schema.columns}
    assert kinds["c_str"] == ("categorical", "hex", 1) and kinds["c_int"] == ("categorical", "int", 1)
    assert kinds["tags"] == ("categorical", "int", 0) and kinds["words"] == ("categorical", "hex", 0)
    assert kinds["unused"][0] == "ignore" and "parquet" in FORMATS
    assert schema.sparse_names == [c for c, _ in CATEGORICAL] and schema.dense_names == list(DENSE)


@pytest.mark.parametrize("names, message", [
    ({"categorical": ["c_str", "nope"]}, r"categorical column 'nope' is not in the file; its columns: y \(double\), "
                                         r"d_f \(double\), d_i \(int32\), c_str \(string\)"),
    ({"label": [], "dense": [], "categorical": []}, r"name the label column \(--label\) .* "
                                                    r"the file's columns: y \(double\)"),
    ({"label": ["y"], "dense": [], "categorical": []}, "at least one dense or categorical column"),
    ({"dense": [], "categorical": ["d_f"]}, r"column 'd_f' is double; a categorical column holds int or string ids "
                                            r"\(or lists"),
    ({"label": ["tags"], "categorical": ["c_str"]}, "column 'tags' is list<element: int64>; a label column holds one "
                                                    "number a row"),
    ({"dense": ["words"], "categorical": []}, "column 'words' is large_list"),
])
def test_a_schema_that_does_not_fit_is_one_line_listing_the_columns(tmp_path, rng, names, message):
    path = write(tmp_path / "x.parquet", random_columns(rng, 10))
    with pytest.raises(SchemaError, match=message) as e:
        schema_of(path, **names)
    _one_line_error(e, path)


def test_a_later_file_whose_columns_do_not_fit_is_named(tmp_path, rng):
    first = write(tmp_path / "a.parquet", random_columns(rng, 20))
    columns = random_columns(rng, 20)
    missing = write(tmp_path / "c.parquet", {k: v for k, v in columns.items() if k != "words"})
    columns["tags"] = [1] * 20
    scalar = write(tmp_path / "b.parquet", columns, {**TYPES, "tags": pa.int64()})
    schema = schema_of(first)
    with pytest.raises(SchemaError, match="column 'tags' is int64; the schema reads it as a list") as e:
        read_all(ParquetReader([first, scalar], schema, ReadOptions(max_reported=0)))
    _one_line_error(e, scalar)
    with pytest.raises(SchemaError, match="categorical column 'words' is not in the file") as e:
        read_all(ParquetReader([first, missing], schema, ReadOptions(max_reported=0)))
    _one_line_error(e, missing)


def test_dictionary_encoded_and_bool_columns_read_as_their_values(tmp_path):
    table = pa.table({"y": pa.array([True, False, True]), "s": pa.array(["a", None, "a"]).dictionary_encode(),
                      "b": pa.array([True, False, None])})
    path = tmp_path / "x.parquet"
    pq.write_table(table, path)
    batch = read_all(ParquetReader(path, schema_for("parquet", [path], label=["y"], categorical=["s", "b"])))
    np.testing.assert_array_equal(batch.label, [1, 0, 1])
    np.testing.assert_array_equal(batch.sparse, [[token_id("a", 0), token_id("1", 1, "int")],
                                                 [token_id("", 0), token_id("0", 1, "int")],
                                                 [token_id("a", 0), token_id("", 1)]])


def test_without_pyarrow_parquet_is_one_line_saying_how_to_install_it(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")
                 or m in ("gpuemb.io.parquet_schema", "gpuemb.io.parquet", "gpuemb.io.arrow_columns")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(DataError, match=r"needs pyarrow, which is not installed; "
                                        r"install it with pip install -e '\.\[parquet\]'"):
        schema_for("parquet", [tmp_path / "x.parquet"], label=["y"], categorical=["c"])
