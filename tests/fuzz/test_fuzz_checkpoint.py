"""Fuzzing a checkpoint's ``manifest.json`` and ``state.h5``: bytes flipped, and attributes replaced with a manifest
that vouches for them. Loading either gives back what was saved or raises a CheckpointError; any other exception
is a failure. (``embeddings.h5`` is a snapshot: tests/fuzz/test_fuzz_snapshot.py.)"""
import json
import os
import shutil

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuemb.train import CheckpointError, TrainConfig, train
from gpuemb.train import checkpoint as ckpt

pytestmark = pytest.mark.fuzz
SETTINGS = settings(max_examples=int(os.environ.get("GPUEMB_FUZZ_EXAMPLES", "25")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
STATE_ATTRS = ("optimizer", "module_state", "loader", "trainer", "format", "version")
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=False),
                              st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=3)), max_leaves=12)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A checkpoint folder, its manifest body and its state."""
    where = tmp_path_factory.mktemp("fuzz") / "ckpt"
    train(TrainConfig.from_dict({"model_args": {"top": [8], "bottom": [4]}, "embedding_dim": 4, "batch_size": 32,
                                 "train_rows": 512, "eval_rows": 64, "steps": 2, "progress": False, "seed": 5,
                                 "checkpoint_dir": str(where)}))
    folder = where / "step-000000002"
    return folder, ckpt.read_manifest(folder), ckpt.read_state(folder)


def copy(original, tmp_path):
    folder = tmp_path / "step-000000002"
    shutil.copytree(original[0], folder, dirs_exist_ok=True)
    return folder


def load(folder):
    """The manifest body and state read from ``folder``, or None after a CheckpointError."""
    try:
        return ckpt.read_manifest(folder), ckpt.read_state(folder)
    except CheckpointError:
        return None


def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@SETTINGS
@given(name=st.sampled_from([ckpt.MANIFEST, ckpt.STATE]),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4))
def test_flipped_bytes_load_right_or_raise_a_checkpoint_error(original, tmp_path, name, flips):
    folder = copy(original, tmp_path)
    path = folder / name
    data = bytearray(path.read_bytes())
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    path.write_bytes(data)
    got = load(folder)
    assert got is None or (same(got[0]["config"], original[1]["config"]) and same(got[1], original[2]))


@SETTINGS
@given(changes=st.lists(st.tuples(st.sampled_from(STATE_ATTRS), st.one_of(JSON.map(json.dumps), JSON.filter(
    lambda v: isinstance(v, (int, float, str)) and "\x00" not in str(v)))), min_size=1, max_size=3),
       body=st.dictionaries(st.sampled_from(["step", "files", "config", "sharded", "format", "version"]), JSON,
                            max_size=2))
def test_hostile_fields_vouched_for_raise_a_checkpoint_error_or_load(original, tmp_path, changes, body):
    folder = copy(original, tmp_path)
    with h5py.File(folder / ckpt.STATE, "r+") as f:
        for name, value in changes:
            f.attrs[name] = value
    doc = json.loads((folder / ckpt.MANIFEST).read_text())
    doc["body"]["files"][ckpt.STATE] = ckpt.file_entry(folder / ckpt.STATE)
    doc["body"].update(body)
    doc["crc32"] = ckpt._body_crc(doc["body"])
    (folder / ckpt.MANIFEST).write_text(json.dumps(doc))
    got = load(folder)
    assert got is None or got[0]["step"] == doc["body"]["step"]
