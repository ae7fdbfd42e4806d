"""Bad input: real sample lines damaged on purpose, empty and missing files, schema mismatches, broken shards."""
import gzip

import h5py
import numpy as np
import pytest

from gpuemb.io.avazu import read_avazu
from gpuemb.io.batch import Batch
from gpuemb.io.checksum import array_crcs
from gpuemb.io.convert import convert
from gpuemb.io.criteo import criteo_schema, read_criteo
from gpuemb.io.csv_reader import read_csv
from gpuemb.io.errors import BadLineError, BadLineWarning, DataError, SchemaError, ShardError
from gpuemb.io.hashing import token_id
from gpuemb.io.reader import ReadOptions, TextReader
from gpuemb.io.shard_attrs import record_crcs
from gpuemb.io.shards import ShardSource, open_shard

TSV = "criteo_sample.tsv"


def sample_line(data, number, name=TSV):
    return (data / name).read_text().split("\n")[number - 1]


def with_field(line, index, value, sep="\t"):
    fields = line.split(sep)
    fields[index] = value
    return sep.join(fields)


def damage_cases(data):
    line5, line9, line20 = (sample_line(data, n) for n in (5, 9, 20))
    return {
        5: ("\t".join(line5.split("\t")[:-1]), "expected 40 fields, found 39"),
        9: (with_field(line9, 3, "12x"), "field 4 (I3): dense value is not a number: '12x'"),
        20: (with_field(line20, 15, "zz1234ab"), "field 16 (C2): bad hex token: 'zz1234ab'"),
    }


def test_bad_lines_are_skipped_counted_and_reported(data, damaged):
    cases = damage_cases(data)
    path = damaged(TSV, {n: text for n, (text, _) in cases.items()})
    reader = read_criteo(path)
    with pytest.warns(BadLineWarning) as caught:
        b = Batch.concat(list(reader))
    assert b.rows == 197 and reader.report.rows == 197 and reader.report.bad == 3
    want = [f"{path}:{n}: {why}" for n, (_, why) in sorted(cases.items())]
    assert [str(bad) for bad in reader.report.first_bad] == want
    assert [str(w.message) for w in caught] == want
    good = Batch.concat(list(read_criteo(data / TSV)))
    keep = np.setdiff1d(np.arange(200), [n - 1 for n in cases])
    np.testing.assert_array_equal(b.sparse, good.sparse[keep])
    assert "bad hex token: 1" in reader.report.summary()


def test_only_the_first_few_bad_lines_are_warned_but_all_are_counted(data, damaged):
    short = "\t".join(sample_line(data, 1).split("\t")[:30])
    path = damaged(TSV, {n: short for n in range(1, 51)})
    reader = TextReader(path, criteo_schema(), ReadOptions(max_reported=3, block_bytes=2048))
    with pytest.warns(BadLineWarning) as caught:
        assert Batch.concat(list(reader)).rows == 150
    assert len(caught) == 3 and reader.report.bad == 50
    assert reader.report.reasons["wrong field count"] == 50


@pytest.mark.parametrize("line", [5, 9, 20])
def test_strict_raises_on_the_first_bad_line_with_file_line_and_reason(data, damaged, line):
    text, why = damage_cases(data)[line]
    path = damaged(TSV, {line: text})
    with pytest.raises(BadLineError, match=f"{path}:{line}: ") as err:
        list(TextReader(path, criteo_schema(), ReadOptions(strict=True)))
    assert why in str(err.value) and err.value.bad.line == line


@pytest.mark.parametrize("token", [str(-2 ** 63 - 1), str(2 ** 63), str(2 ** 64 - 1), str(-2 ** 64 + 1),
                                   "123456789012345678901"])
def test_an_int_token_outside_int64_is_a_bad_field(tmp_path, token):
    """Tokens past int64 once wrapped onto others' ids ("-18446744073709551615" read as "1"); int64's own edges
    stay good and read as hashing.token_id reads them."""
    rng = np.random.default_rng(len(token))
    ids = [str(i) for i in rng.integers(-2 ** 63, 2 ** 63 - 1, 40, endpoint=True)] + [str(-2 ** 63), str(2 ** 63 - 1)]
    labels = rng.integers(0, 2, len(ids) + 1)
    lines = [f"{y},{i}" for y, i in zip(labels, ids[:7] + [token] + ids[7:])]
    path = tmp_path / "ints.csv"
    path.write_text("label,id\n" + "\n".join(lines) + "\n")
    reader = read_csv(path, ["label"], categorical=["id"], kind="int")
    with pytest.warns(BadLineWarning, match=f":9: field 2 \\(id\\): bad integer token .*int64.*{token}"):
        b = Batch.concat(list(reader))
    assert reader.report.bad == 1
    np.testing.assert_array_equal(b.sparse[:, 0], [token_id(i, 0, "int") for i in ids])
    np.testing.assert_array_equal(b.label, np.delete(labels, 7))
    with pytest.raises(ValueError, match="is not a valid int token"):  # the one-token function agrees
        token_id(token, 0, "int")


def test_empty_missing_and_header_only_files_give_clear_errors(tmp_path, data):
    empty = tmp_path / "empty.tsv"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="empty.tsv: the file is empty"):
        list(read_criteo(empty))
    with pytest.raises(DataError, match="nope.tsv: no such file"):
        list(read_criteo(tmp_path / "nope.tsv"))
    header_only = tmp_path / "h.csv"
    header_only.write_text((data / "avazu_sample.csv").read_text().split("\n")[0] + "\n")
    with pytest.raises(DataError, match="h.csv: has a header but no data lines"):
        list(read_avazu(header_only))


def test_schema_mismatch_names_the_column(data, damaged):
    header = sample_line(data, 1, "criteo_sample.csv")
    path = damaged("criteo_sample.csv", {1: header.replace("I3", "I3x")})
    with pytest.raises(SchemaError, match="header column 4 is 'I3x', the schema expects 'I3'"):
        list(TextReader(path, criteo_schema(",", header=True)))
    with pytest.raises(SchemaError, match="dense column 'I99' is not among the columns"):
        read_csv(data / "criteo_sample.csv", ["label"], ["I99"])
    with pytest.raises(SchemaError, match="has 24 columns, the schema 40"):
        list(TextReader(data / "avazu_sample.csv", criteo_schema(",", header=True)))


def test_truncated_gzip_is_a_data_error(data, tmp_path):
    packed = gzip.compress((data / TSV).read_bytes())
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(DataError, match="cut.tsv.gz: cannot be read past this point"):
        list(read_criteo(path))


@pytest.fixture
def shard(data, tmp_path):
    return convert([data / TSV], tmp_path / "out", criteo_schema()).paths["train"][0]


def test_truncated_shard_is_detected(shard):
    raw = open(shard, "rb").read()
    with open(shard, "wb") as f:
        f.write(raw[: len(raw) // 2])
    with pytest.raises(ShardError, match="part-00000.h5: .*truncated or corrupt"):
        ShardSource([shard])


def test_shard_whose_rows_disagree_with_its_attributes_is_detected(shard):
    with h5py.File(shard, "r+") as f:
        f.attrs["n_rows"] = 250
    with pytest.raises(ShardError, match="attribute 'n_rows' has checksum 0x[0-9a-f]{8}, but attr_crcs recorded"):
        open_shard(shard)
    with h5py.File(shard, "r+") as f:  # as a hand edit would, with the checksums made again
        f.attrs["attr_crcs"] = record_crcs(f.attrs, array_crcs([f["checksums"][()]])[0])
    with pytest.raises(ShardError, match="dataset 'label' is float32 \\(200,\\), but the attributes say float32 "
                                         "\\(250,\\); the shard is truncated or corrupt"):
        open_shard(shard)


def test_not_a_shard_is_detected(tmp_path, shard):
    bogus = tmp_path / "part-00000.h5"
    bogus.write_text("label,I1\n1,2\n")
    with pytest.raises(ShardError, match="cannot be opened as HDF5"):
        open_shard(bogus)
    with h5py.File(shard, "r+") as f:
        del f.attrs["chunk_rows"]
    with pytest.raises(ShardError, match="attribute 'chunk_rows' is missing"):
        open_shard(shard)
