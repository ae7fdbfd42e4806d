"""A bundle records which stream its tables drew new rows from (``initializer.draw``, version 3), and a bundle of
version 2, written before there were two, still loads and draws absent keys as it was trained to: draw 1."""
import json

import numpy as np
import pytest

from gpuemb.serve import BundleError, Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.manifest import MANIFEST, VERSION, _body_sha
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer


def _rewrite(folder, edit):
    """Apply ``edit`` to the manifest's body, and seal it again as the exporter does."""
    doc = json.loads((folder / MANIFEST).read_text())
    edit(doc["body"])
    doc["sha256"] = _body_sha(doc["body"])
    (folder / MANIFEST).write_text(json.dumps(doc))


def _absent_rows(folder, keys):
    """``{table: rows of keys}`` as the bundle's runtime reads keys it never saw, and each table's initializer."""
    with Predictor(folder, runtime="numpy") as p:
        tables = p._served[0]
        return {name: (t.lookup(keys), dict(t.meta["initializer"])) for name, t in tables.items()}


@pytest.fixture
def folder(train, tmp_path):
    write_bundle(train("dlrm", {"bottom": (8,), "top": (8,)}), tmp_path / "b")
    return tmp_path / "b"


def test_a_bundle_draws_absent_keys_from_the_stream_it_records(folder):
    keys = np.random.default_rng().integers(2 ** 61, 2 ** 62, 50)  # far above every trained key
    body = json.loads((folder / MANIFEST).read_text())["body"]
    assert body["version"] == VERSION == 3
    for name, (rows, init) in _absent_rows(folder, keys).items():
        assert init["draw"] == 2 and body["tables"][name]["initializer"] == init
        want = initial_weights(Initializer(**init), keys, rows.shape[1])
        assert np.array_equal(rows, want) and np.std(rows) > 0

    def as_version_2(b):  # what gpuemb wrote before draws: version 2, initializers without one
        b["version"] = 2
        for t in b["tables"].values():
            del t["initializer"]["draw"]
    _rewrite(folder, as_version_2)
    for name, (rows, init) in _absent_rows(folder, keys).items():
        assert "draw" not in init
        want = initial_weights(Initializer(**init, draw=1), keys, rows.shape[1])
        assert np.array_equal(rows, want)


@pytest.mark.parametrize("version, draw, why", [(3, None, "draw: one of 1, 2"), (3, 5, "draw: one of 1, 2"),
                                                (3, True, "draw: one of 1, 2"), (2, 2, "no draw (a version 2 bundle)"),
                                                (4, 2, "version 4, not 'gpuemb-bundle' version 2 or 3")])
def test_a_draw_that_does_not_fit_the_bundle_version_is_one_line(folder, version, draw, why):
    def edit(b):
        b["version"] = version
        for t in b["tables"].values():
            t["initializer"].pop("draw")
            if draw is not None:
                t["initializer"]["draw"] = draw
    _rewrite(folder, edit)
    with pytest.raises(BundleError) as e:
        Predictor(folder, runtime="numpy")
    assert why in str(e.value) and "\n" not in str(e.value)
