"""Checkpoints against what a crash, a second run or a hostile file leave: leftovers cleared, one writer per
folder, a resume that falls back past a broken checkpoint, and attributes of the wrong type named, not raised."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from gpuemb.train import CheckpointError, Run, TrainConfig, train
from gpuemb.train import checkpoint as ckpt


TINY = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500, progress=False,
            steps=4, seed=1)


def config(tmp_path, **changes):
    return TrainConfig.from_dict(TINY | {"checkpoint_dir": str(tmp_path / "ckpt")} | changes)


@pytest.fixture
def saved(tmp_path):
    """The checkpoint dir of a run that kept steps 2 and 4 (``latest``)."""
    train(config(tmp_path, checkpoint_every=2))
    return tmp_path / "ckpt"


def resume(tmp_path, where="latest"):
    run = Run(config(tmp_path, steps=8, resume=str(where)))
    try:
        return run.resume()
    finally:
        run.close()


def test_a_run_clears_what_dead_runs_left_and_keeps_the_checkpoints(tmp_path, saved):
    junk = [".step-000000006.tmp-1a2b3c4d", ".step-000000002.old-99aa88bb", ".latest.tmp-0badf00d"]
    for name in junk[:2]:
        (saved / name).mkdir()
        (saved / name / "state.h5").write_bytes(os.urandom(64))
    (saved / junk[2]).write_text("step-000000006\n")
    (saved / "step-000000005").mkdir()  # a prune or a copy cut short: no manifest, and latest names another
    (saved / "step-000000005" / "embeddings.h5").write_bytes(os.urandom(64))
    run = Run(config(tmp_path, steps=8, resume="latest"))
    run.close()
    assert sorted(os.listdir(saved)) == ["latest", "step-000000002", "step-000000004"]


def test_a_second_run_on_one_checkpoint_dir_is_refused(tmp_path, saved):
    first = Run(config(tmp_path, steps=8, resume="latest"))
    try:
        with pytest.raises(CheckpointError, match="ckpt: another run is writing checkpoints there"):
            Run(config(tmp_path, steps=8))
        (saved / ".step-000000006.tmp-1a2b3c4d").mkdir()  # the live run's: kept while it holds the folder
    finally:
        first.close()
    assert (saved / ".step-000000006.tmp-1a2b3c4d").is_dir()
    Run(config(tmp_path, steps=8)).close()  # free again once the first closed, and its leftover is cleared
    assert not (saved / ".step-000000006.tmp-1a2b3c4d").exists()


def test_a_prune_renames_a_checkpoint_away_before_removing_it(tmp_path, monkeypatch):
    seen = []
    real = ckpt.remove_folder.__globals__["shutil"].rmtree

    def cut(path, *args, **kwargs):  # what the folder looks like when a kill stops the removal
        seen.append((os.path.basename(path), os.listdir(os.path.dirname(path))))
        real(path, *args, **kwargs)

    monkeypatch.setattr(ckpt.remove_folder.__globals__["shutil"], "rmtree", cut)
    train(config(tmp_path, steps=3, checkpoint_every=1, keep_checkpoints=1))
    pruned = [(name, listed) for name, listed in seen if ".old-" in name]
    assert len(pruned) == 2 and all(f"step-{name[6:15]}" not in listed for name, listed in pruned)


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("damage", [
    lambda d: flip_byte(d / "state.h5"),
    lambda d: flip_byte(d / "embeddings.h5"),
    lambda d: os.remove(d / "embeddings.h5"),
    lambda d: (d / "manifest.json").write_text("{"),
    lambda d: os.remove(d / "manifest.json")])
def test_resume_latest_falls_back_to_the_newest_checkpoint_that_checks_out(tmp_path, saved, capfd, damage):
    damage(saved / "step-000000004")
    assert resume(tmp_path) == str(saved / "step-000000002")
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step-000000004" in err[0] and "resuming from" in err[0] and \
        err[0].endswith("step-000000002, the checkpoint before it")
    with pytest.raises(CheckpointError, match="step-000000004"):  # named by its path: never another one
        resume(tmp_path, saved / "step-000000004")


def test_resume_fails_in_one_line_when_no_checkpoint_checks_out(tmp_path, saved):
    for step in ("step-000000002", "step-000000004"):
        flip_byte(saved / step / "state.h5")
    with pytest.raises(CheckpointError, match=r"ckpt: no checkpoint there checks out; the oldest: .*"
                                              r"step-000000002/state.h5: its CRC32"):
        resume(tmp_path)


def test_a_table_file_of_another_checkpoint_is_refused_even_with_a_manifest_that_vouches_for_it(tmp_path, saved,
                                                                                                capfd):
    new, old = saved / "step-000000004", saved / "step-000000002"
    shutil.copyfile(old / "embeddings.h5", new / "embeddings.h5")  # the previous checkpoint's rows, whole
    assert resume(tmp_path) == str(old)  # its CRC32 is not the manifest's
    assert "embeddings.h5: its CRC32 does not match" in capfd.readouterr().err
    doc = json.loads((new / "manifest.json").read_text())  # re-signed for the copied file: its meta still tells
    doc["body"]["files"]["embeddings.h5"] = ckpt.file_entry(new / "embeddings.h5")
    doc["crc32"] = ckpt._body_crc(doc["body"])
    (new / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"embeddings.h5: holds the tables of step 2, checkpoint '[0-9a-f]{8}', "
                                              r"but its manifest is of step 4, checkpoint '[0-9a-f]{8}'; a file of "
                                              "another checkpoint was copied in"):
        resume(tmp_path, new)
    assert resume(tmp_path) == str(old)


def rewrite(folder, **attrs):
    """``state.h5`` with ``attrs`` set, and a manifest whose sizes and CRC32 match: hostile, not corrupt."""
    with h5py.File(folder / "state.h5", "r+") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
    doc = json.loads((folder / "manifest.json").read_text())
    doc["body"]["files"]["state.h5"] = ckpt.file_entry(folder / "state.h5")
    doc["crc32"] = ckpt._body_crc(doc["body"])
    (folder / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("attrs", [
    {"trainer": json.dumps({"step": "4", "samples": 1, "window": []})},
    {"trainer": json.dumps([1, 2])},
    {"optimizer": json.dumps({"rule": "adam", "steps": [1]})},
    {"optimizer": "[" * 100000 + "]" * 100000},
    {"loader": np.arange(3)},
    {"module_state": '{"a": ' + "[" * 40 + "]" * 40 + "}"}])
def test_hostile_state_attributes_are_a_checkpoint_error(tmp_path, saved, attrs):
    rewrite(saved / "step-000000004", **attrs)
    with pytest.raises(CheckpointError, match="step-000000004/state.h5"):
        resume(tmp_path, saved / "step-000000004")


@pytest.mark.parametrize("body", [{"step": "4"}, {"files": {"state.h5": 7}}, {"files": {"../x": {"bytes": 1}}},
                                  {"sharded": {"world_size": 0, "collections": []}}])
def test_hostile_manifest_fields_are_a_checkpoint_error(tmp_path, saved, body):
    folder = saved / "step-000000004"
    doc = json.loads((folder / "manifest.json").read_text())
    doc["body"].update(body)
    doc["crc32"] = ckpt._body_crc(doc["body"])
    (folder / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="step-000000004/manifest.json: its"):
        resume(tmp_path, folder)
