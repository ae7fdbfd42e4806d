"""The Predictor's host cache, its refusals of bad bundles and bad requests (one line each), and that loading it
loads no part of the training stack."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpuemb.serve import BundleError, Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.manifest import MANIFEST, TABLES_FILE

HYPER = {"deep": (16,)}


@pytest.fixture
def bundle(train, tmp_path):
    """``(folder, model)``: a trained Wide&Deep's fp32 bundle (per-feature tables and first-order ones)."""
    model = train("wide_deep", HYPER)
    write_bundle(model, tmp_path / "b")
    return tmp_path / "b", model


@pytest.mark.parametrize("capacity", [1, 50, 100000])
def test_host_cache_reads_rows_on_demand(bundle, capacity, held_out, eval_output):
    folder, model = bundle
    dense, sparse = held_out()
    with Predictor(folder, host_cache_rows=capacity, runtime="numpy") as p:
        assert all(t.parts is None for t in p.tables.values())  # nothing loaded up front
        for lo in range(0, 512, 128):  # batches that meet some rows again, some not
            got = p.predict(dense[lo:lo + 128], sparse[lo:lo + 128])
            np.testing.assert_allclose(got, eval_output(model, dense[lo:lo + 128], sparse[lo:lo + 128]), atol=1e-5,
                                       rtol=0)
            assert all(len(t.cache) <= min(capacity, len(t)) for t in p.tables.values())
        assert any(len(t.cache) == min(capacity, len(t)) for t in p.tables.values())


def _one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_bad_requests(bundle):
    folder, _ = bundle
    with Predictor(folder, runtime="numpy") as p:
        dense = np.zeros((3, 4), np.float32)
        for sparse in (np.zeros((3, 7), np.int64), np.zeros(3, np.int64)):
            with pytest.raises(BundleError) as e:
                p.predict(dense, sparse)
            _one_line(e, "sparse", "want integer keys [B, F] with F = 8")
        with pytest.raises(BundleError) as e:
            p.predict(dense, np.zeros((3, 8), np.float32))
        _one_line(e, "predict: sparse: keys of dtype float32", "cast them to int64")
        with pytest.raises(BundleError) as e:
            p.predict(np.zeros((2, 4)), np.zeros((3, 8), np.int64))
        _one_line(e, "dense has shape (2, 4)", "[3, 4]")
    for kw, words in (({"runtime": "tvm"}, ("runtime='tvm'", "numpy")), ({"host_cache_rows": 0}, ("host_cache_rows",))):
        with pytest.raises(BundleError) as e:
            Predictor(folder, **kw)
        _one_line(e, *words)


@pytest.mark.parametrize("name, hyper, shared", [("wide_deep", HYPER, False),
                                                ("dlrm", {"bottom": (8,), "top": (8,)}, True),
                                                ("mmoe", {"expert": (8,), "tower": (4,)}, False)])
def test_an_empty_batch_gives_an_empty_result(train, held_out, tmp_path, name, hyper, shared):
    """[0] or [0, T], float32, as a full batch's: a shared table's keys once failed to reshape."""
    write_bundle(train(name, hyper, shared, steps=2), tmp_path / "b")
    dense, sparse = held_out(rows=16)
    with Predictor(tmp_path / "b", runtime="numpy") as p:
        full = p.predict(dense, sparse)
        for probabilities in (False, True):
            empty = p.predict(dense[:0], sparse[:0], probabilities)
            assert empty.shape == (0,) + full.shape[1:] and empty.dtype == full.dtype
        assert p.predict(np.empty((0, 4)), np.empty((0, 8), np.uint8)).shape == (0,) + full.shape[1:]


def test_ragged_or_non_numeric_inputs_are_one_line(bundle, held_out):
    folder, _ = bundle
    dense, sparse = held_out(rows=3)
    ragged_sparse = [list(r) for r in sparse]
    ragged_sparse[1] = ragged_sparse[1][:5]
    ragged_dense = [list(r) for r in dense]
    ragged_dense[2].append(1.0)
    words = dense.astype(str)
    words[1, 2] = "n/a"
    missing = dense.astype(object)
    missing[0, 3] = None
    cases = [((dense, ragged_sparse), ("sparse is a list", "[B, F] with F = 8")),
             ((ragged_dense, sparse), ("dense is a list", "[B, n_dense] with n_dense = 4")),
             ((words, sparse), ("dense is <U", "want numbers")),
             ((missing, sparse), ("dense is object", "want numbers"))]
    with Predictor(folder, runtime="numpy") as p:
        for (d, s), words in cases:
            with pytest.raises(BundleError) as e:
                p.predict(d, s)
            _one_line(e, "predict: ", *words)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e39])
def test_a_dense_value_that_is_not_a_finite_float32_is_refused(bundle, held_out, value):
    """The model never saw one (the readers skip such lines), so its answer would be garbage: NaN for every task."""
    folder, _ = bundle
    dense, sparse = held_out(rows=8)
    dense = dense.astype(np.float64)
    dense[5, 2] = value
    with Predictor(folder, runtime="numpy") as p:
        with pytest.raises(BundleError) as e:
            p.predict(dense, sparse)
        _one_line(e, f"dense[5, 2] is {value!r}", "not a finite float32", "leave the row out")
        np.testing.assert_array_equal(p.predict(dense[:5], sparse[:5]), p.predict(dense[:5], sparse[:5]))


def test_a_batch_too_large_for_memory_is_one_line(bundle):
    """A batch of 10**15 rows: nothing as broadcast views, and once read, more bytes than a process can address
    (2**47), so it fails as it would on any machine, whatever its overcommit setting."""
    folder, _ = bundle
    B = 10 ** 15
    dense = np.broadcast_to(np.float32(0.5), (B, 4))
    sparse = np.broadcast_to(np.arange(8, dtype=np.int64), (B, 8))
    with Predictor(folder, runtime="numpy") as p:
        with pytest.raises(BundleError) as e:
            p.predict(dense, sparse)
        _one_line(e, f"a batch of {B} rows does not fit in memory", "smaller batches")


def test_corrupt_or_missing_files(bundle):
    folder, _ = bundle
    tables = folder / TABLES_FILE
    data = bytearray(tables.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte the file's SHA-256 covers, whatever h5py would make of it
    tables.write_bytes(bytes(data))
    with pytest.raises(BundleError) as e:
        Predictor(folder)
    _one_line(e, str(tables), "SHA-256", "tools/export.py")
    os.remove(tables)
    with pytest.raises(BundleError) as e:
        Predictor(folder)
    _one_line(e, "is missing")
    doc = json.loads((folder / MANIFEST).read_text())
    doc["body"]["n_dense"] = 5  # an edit the checksum catches
    (folder / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(BundleError) as e:
        Predictor(folder)
    _one_line(e, "checksum does not match")
    (folder / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError) as e:
        Predictor(folder)
    _one_line(e, "cannot be read")
    with pytest.raises(BundleError) as e:
        Predictor(folder / "nowhere")
    _one_line(e, "is missing")


def test_loading_a_bundle_loads_no_training_code(bundle):
    folder, _ = bundle
    code = ("import sys, numpy as np; from gpuemb.serve import Predictor\n"
            f"p = Predictor({str(folder)!r}, runtime='numpy'); p.predict(np.zeros((2, 4)), np.zeros((2, 8), int))\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('gpuemb'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "gpuemb.serve.predictor" in loaded
    training = [m for m in loaded if m.partition(".")[2].split(".")[0] in ("models", "train", "autograd", "optim",
                                                                          "nn", "store")]
    assert not training, training


def test_an_export_replaces_a_bundle_whole_or_not_at_all(tmp_path, monkeypatch):
    """A second export over a bundle replaces it; one that fails midway (here, its rows) leaves the bundle there
    byte for byte and no temporary folder; a folder of other files is refused and left alone."""
    from gpuemb.models import build
    from gpuemb.serve import bundle
    from gpuemb.store import TableConfig

    rng = np.random.default_rng(4)
    model = build("dlrm", 2, [TableConfig(f"t{i}", 4) for i in range(2)], bottom=(4,), top=(4,)).eval()
    model(rng.standard_normal((5, 2)).astype(np.float32), rng.integers(0, 100, (5, 2)))  # eval reads, no rows
    out = tmp_path / "b"
    bundle.write_bundle(model, out, "fp32")
    bundle.write_bundle(model, out, "int8")  # replaced whole
    with Predictor(out) as p:
        assert p.manifest["rows"] == "int8"
    before = {f.name: f.read_bytes() for f in out.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(bundle, "write_table", full_disk)
    with pytest.raises(BundleError, match=r"tables.h5: cannot be written \(No space left"):
        bundle.write_bundle(model, out, "fp16")
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no temporary folder left

    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an empty folder or a bundle to replace"):
        bundle.write_bundle(model, other)
    assert (other / "keep.txt").read_text() == "mine"
