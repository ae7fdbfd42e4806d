"""Checkpoints: written whole or not at all, named by ``latest`` only when complete, and never loaded corrupt."""
import json
import os

import h5py
import numpy as np
import pytest

from gpuemb.train import CheckpointError, ResumeError, Run, TrainConfig, train
from gpuemb.train import checkpoint as ckpt


def config(tmp_path, **changes):
    base = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500,
                progress=False, checkpoint_dir=str(tmp_path / "ckpt"), steps=4, seed=1)
    return TrainConfig.from_dict({**base, **changes})


@pytest.fixture
def saved(tmp_path):
    """A checkpoint dir holding the checkpoints of steps 2 and 4 (``latest`` is step 4)."""
    train(config(tmp_path, checkpoint_every=2))
    return tmp_path / "ckpt"


def resume(tmp_path, where="latest", **changes):
    run = Run(config(tmp_path, steps=8, resume=str(where), **changes))
    try:
        return run.resume()
    finally:
        run.close()


def test_a_checkpoint_holds_the_parts_the_issue_lists(saved):
    assert sorted(os.listdir(saved)) == ["latest", "step-000000002", "step-000000004"]
    assert (saved / "latest").read_text().strip() == "step-000000004"
    folder = saved / "step-000000004"
    body = ckpt.read_manifest(folder)
    assert body["step"] == 4 and body["config"]["model"]["embedding_dim"] == 4
    state = ckpt.read_state(folder)
    assert {"top.layers.0.weight", "bottom.layers.0.bias"} <= state["trainer"]["model"].keys()
    assert state["trainer"]["optimizer"]["step_count"] == 4 and state["trainer"]["optimizer"]["params"]
    assert state["trainer"]["module_state"]["top"] == {"step": 4}  # the dropout counter of the top MLP
    assert state["loader"]["position"] == 4 * 64 and state["trainer"]["samples"] == 4 * 64
    with h5py.File(folder / "embeddings.h5") as f:  # a plain snapshot that h5py reads
        assert f["tables/embeddings/keys"].shape[0] > 100


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    train(config(tmp_path, steps=5, checkpoint_every=1, keep_checkpoints=2))
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["latest", "step-000000004", "step-000000005"]


def test_a_save_that_fails_leaves_the_last_checkpoint_whole(tmp_path, saved, monkeypatch):
    run = Run(config(tmp_path, steps=8, resume="latest"))
    try:
        run.resume()
        with run.batches as batches:
            run.trainer.train_step(next(batches))

        def crash(*args, **kwargs):
            raise OSError("disk full")

        monkeypatch.setattr(ckpt, "save_snapshot", crash)
        with pytest.raises(CheckpointError, match=r"step 5 could not be written \(disk full\).*000004, is whole"):
            run.save_checkpoint()
    finally:
        run.close()
    assert sorted(os.listdir(saved)) == ["latest", "step-000000002", "step-000000004"]  # no temp folder left
    assert resume(tmp_path).endswith("step-000000004")


def test_latest_names_a_checkpoint_only_once_it_is_complete(tmp_path, saved, monkeypatch):
    seen = []
    real = ckpt._point_latest

    def check(directory, name):  # when latest moves, the folder it will name is complete
        seen.append(ckpt.read_manifest(os.path.join(directory, name))["step"])
        real(directory, name)

    monkeypatch.setattr(ckpt, "_point_latest", check)
    train(config(tmp_path, steps=6, checkpoint_every=3, resume="latest"))
    assert seen == [6]


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def rewrite_manifest(folder, **changes):
    """The manifest with ``changes`` in its body and a checksum that matches them: hostile, not corrupt."""
    doc = json.loads((folder / "manifest.json").read_text())
    doc["body"].update(changes)
    doc["crc32"] = ckpt._body_crc(doc["body"])
    (folder / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("damage,message", [
    (lambda d: flip_byte(d / "state.h5", os.path.getsize(d / "state.h5") // 2), "state.h5: its CRC32 does not match"),
    (lambda d: os.truncate(d / "embeddings.h5", 1000), "embeddings.h5: is 1000 bytes, the manifest says"),
    (lambda d: os.remove(d / "state.h5"), "state.h5: is missing"),
    (lambda d: (d / "manifest.json").write_text((d / "manifest.json").read_text().replace('"step": 4', '"step": 5')),
     "manifest.json: its checksum does not match"),
    (lambda d: (d / "manifest.json").write_text("{"), "manifest.json: cannot be read"),
    (lambda d: rewrite_manifest(d, config=[1, 2]), "manifest.json: its 'config' is list, not a table"),
])
def test_a_corrupt_checkpoint_is_named_and_not_loaded(tmp_path, saved, damage, message):
    damage(saved / "step-000000004")
    with pytest.raises(CheckpointError) as e:  # named by its path, so never another one in its place
        resume(tmp_path, saved / "step-000000004")
    assert message in str(e.value)


def test_a_corrupt_embedding_chunk_is_caught_before_it_is_parsed_and_the_resume_falls_back(tmp_path, saved, capfd):
    with h5py.File(saved / "step-000000004" / "embeddings.h5", "r+") as f:  # same size, other bytes
        f["tables/embeddings/rows"][0, 0] += 1
    assert resume(tmp_path).endswith("step-000000002")
    assert "step-000000004/embeddings.h5: its CRC32 does not match the manifest's" in capfd.readouterr().err
    with pytest.raises(CheckpointError, match="embeddings.h5: its CRC32 does not match"):
        resume(tmp_path, saved / "step-000000004")


def test_latest_naming_a_missing_checkpoint_falls_back_and_an_empty_dir_is_an_error(tmp_path, saved, capfd):
    (saved / "latest").write_text("step-000000009\n")
    assert resume(tmp_path).endswith("step-000000004")
    assert "step-000000009/manifest.json: cannot be read" in capfd.readouterr().err
    with pytest.raises(ResumeError, match="holds no checkpoint"):
        resume(tmp_path, tmp_path / "elsewhere")


@pytest.mark.parametrize("changes,message", [
    ({"embedding_dim": 8}, "--embedding-dim was 4, now 8"),
    ({"model": "dcn", "model_args": {}}, "--model was 'dlrm', now 'dcn'"),
    ({"preset": "small"}, "--preset was 'quick', now 'small'"),
    ({"seed": 2}, "--seed was 1, now 2"),
])
def test_resuming_with_other_settings_names_the_field(tmp_path, saved, changes, message):
    with pytest.raises(ResumeError) as e:
        resume(tmp_path, **changes)
    assert message in str(e.value)


def test_a_schedule_that_follows_steps_says_to_pin_its_length(tmp_path):
    train(config(tmp_path, schedule="cosine"))
    with pytest.raises(ResumeError, match="total_steps: saved 4, here 8.*--decay-steps"):
        resume(tmp_path, schedule="cosine")


def test_nan_weights_are_never_checkpointed(tmp_path, saved):
    run = Run(config(tmp_path, steps=8, resume="latest"))
    try:
        run.resume()
        run.model.top.layers[0].weight.data[0, 0] = np.nan
        with pytest.raises(Exception, match="top.layers.0.weight holds NaN or inf, so no checkpoint was written"):
            run.save_checkpoint()
    finally:
        run.close()
    assert json.loads((saved / "step-000000004" / "manifest.json").read_text())["body"]["step"] == 4
    assert (saved / "latest").read_text().strip() == "step-000000004"
