"""A bundle's manifest edited and signed again, or hostile: each is one BundleError naming the file and the field,
never a KeyError, TypeError or RecursionError from deep in the reader."""
import hashlib
import json

import pytest

from gpuemb.serve import BundleError, Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.manifest import MANIFEST


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A small DLRM's bundle, written once; each test edits a copy of its manifest."""
    from gpuemb.models import build
    from gpuemb.store import TableConfig

    out = tmp_path_factory.mktemp("bundle") / "b"
    write_bundle(build("dlrm", 2, [TableConfig(f"t{i}", 4) for i in range(3)], bottom=(4,), top=(4,)), out)
    return out


@pytest.fixture
def edited(folder, tmp_path):
    """``edit(change)``: a copy of the bundle whose manifest body ``change(body)`` altered, signed again."""
    def edit(change):
        copy = tmp_path / "b"
        copy.mkdir()
        for f in folder.iterdir():
            (copy / f.name).write_bytes(f.read_bytes())
        doc = json.loads((copy / MANIFEST).read_text())
        change(doc["body"])
        doc["sha256"] = hashlib.sha256(json.dumps(doc["body"], sort_keys=True).encode()).hexdigest()
        (copy / MANIFEST).write_text(json.dumps(doc))
        return copy
    return edit


def refused(copy, *words):
    with pytest.raises(BundleError) as e:
        Predictor(copy, runtime="numpy")
    line = str(e.value)
    assert "\n" not in line and line.startswith(str(copy / MANIFEST)) and "export the bundle again" in line, line
    for w in words:
        assert w in line, line


def _set(path, value):
    def change(body):
        *parents, last = path
        for p in parents:
            body = body[p]
        body[last] = value
    return change


def _drop(key):
    return lambda body: body.pop(key)


@pytest.mark.parametrize("change, field", [
    (_drop("tables"), "field tables is None"),
    (_drop("collections"), "field collections is None"),
    (_set(["n_features"], "3"), "field n_features is '3', not an int >= 1"),
    (_set(["n_dense"], None), "field n_dense is None"),
    (_set(["rows"], "int4"), "field rows is 'int4'"),
    (_set(["origin"], {"step": "8", "chain": None}), "field origin is {'step': '8', 'chain': None}, not {step: an int"),
    (_set(["origin"], {"step": 8, "chain": 5}), "field origin is"),
    (_set(["onnx"], "elsewhere.onnx"), "field onnx is 'elsewhere.onnx'"),
    (_set(["files"], {"../../etc/passwd": {"bytes": 1, "sha256": "0"}}), "field files is"),
    (_set(["tables", "t0", "dim"], 4.0), "field tables.t0.dim is 4.0"),
    (_set(["tables", "t0"], []), "field tables.t0 is []"),
    (_set(["tables", "t1", "initializer", "kind"], "bogus"), "field tables.t1.initializer is"),
    (_set(["tables", "t1", "initializer", "seed"], 2 ** 70), "field tables.t1.initializer is"),
    (_set(["collections", "embeddings", "feature_tables"], ["t0", "t1"]), "feature_tables is ['t0', 't1'], not a "
                                                                          "list of n_features (3)"),
    (_set(["collections", "embeddings", "feature_tables"], ["t0", "t1", "t9"]), "feature_tables"),
    (_set(["collections", "embeddings", "shared"], "no"), "field collections.embeddings is"),
])
def test_a_re_signed_manifest_with_a_field_missing_or_mistyped(edited, change, field):
    refused(edited(change), field)


def test_a_deeply_nested_manifest(folder, tmp_path, edited):
    refused(edited(_set(["hyper"], json.loads("[" * 100 + "]" * 100))), "nests lists or tables more than 16 deep")
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / MANIFEST).write_text("[" * 200_000 + "]" * 200_000)  # past the parser's recursion limit
    refused(hostile, "nests lists or tables more than 16 deep")
    (hostile / MANIFEST).write_text('{"body": "' + "[" * 200_000 + '", "sha256": "0"}')  # brackets in a string
    refused(hostile, "field body is")
