"""An export writes tables.h5 a chunk at a time: from a snapshot's chunks, never its whole table (``load_all``)
nor the model's rows; chunks in any key order land at their sorted places, in every row format."""
import h5py
import numpy as np
import pytest

from gpuemb.autograd import no_grad
from gpuemb.autograd.backend import to_host
from gpuemb.models import build
from gpuemb.serve import Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.bundle_tables import RowSource, snapshot_source, write_table
from gpuemb.serve.rows import decode, encode
from gpuemb.store.options import TableConfig
from gpuemb.store.snapshot.reader import _Rows, read_snapshot
from gpuemb.store.snapshot.tables import save_snapshot
from gpuemb.store.table import EmbeddingTable


@pytest.mark.parametrize("rows", ["fp32", "fp16", "int8"])
def test_chunks_in_any_order_land_sorted(rows, tmp_path):
    rng = np.random.default_rng(0)
    keys = rng.choice(2 ** 62, 1000, replace=False).astype(np.int64)
    weights = rng.standard_normal((1000, 5)).astype(np.float32)
    pieces = np.array_split(np.arange(1000), 7)  # unequal chunks, each in the snapshot's (random) key order
    source = RowSource("t", 5, lambda: [keys[p] for p in pieces], lambda: ((keys[p], weights[p]) for p in pieces))
    with h5py.File(tmp_path / "t.h5", "w") as f:
        assert write_table(f.create_group("t"), source, rows) == 1000
        got = {d: f["t"][d][...] for d in f["t"]}
    order = np.argsort(keys)
    assert np.array_equal(got.pop("keys"), keys[order])
    want = encode(weights[order], rows)
    assert got.keys() == want.keys() and all(np.array_equal(got[d], want[d]) for d in want)
    assert np.abs(decode(got, rows) - weights[order]).max() < 0.02


def test_an_export_reads_the_snapshot_chunk_by_chunk(tmp_path, monkeypatch):
    """The rows come from the snapshot's chunks: a whole-table read, or a read of the model's tables, fails."""
    rng = np.random.default_rng(1)
    model = build("wide_deep", 2, [TableConfig(f"t{i}", 4) for i in range(3)], deep=(8,))
    dense, sparse = rng.standard_normal((50, 2)).astype(np.float32), rng.integers(0, 40, (50, 3))
    model.train()(dense, sparse)  # inserts the keys: rows to export
    model.eval()
    tables = [*model.embeddings.tables, *model.linear_embeddings.tables]
    save_snapshot({t.config.name: t for t in tables}, tmp_path / "s.h5")
    snapshot = read_snapshot(tmp_path / "s.h5")
    sources = {t.config.name: snapshot_source(snapshot.tables[t.config.name], t.dim) for t in tables}

    def whole(*args, **kwargs):
        raise AssertionError("the export read every row at once")
    monkeypatch.setattr(_Rows, "load_all", whole)
    monkeypatch.setattr(EmbeddingTable, "export", whole)
    body = write_bundle(model, tmp_path / "b", "fp32", sources=sources)
    assert all(t["n_rows"] > 0 for t in body["tables"].values())
    with no_grad():
        want = to_host(model(dense, sparse).data)
    with Predictor(tmp_path / "b", runtime="numpy") as p:
        np.testing.assert_allclose(p.predict(dense, sparse), want, rtol=0, atol=1e-5)
