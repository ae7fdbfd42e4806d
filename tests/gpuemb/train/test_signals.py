"""tools/train.py stopped by SIGTERM, as Slurm, Kubernetes and systemd stop a job: it cleans up as a Ctrl-C does.

The run converts a raw file and keeps its table on the SSD tier, both in its temporary folder; after SIGTERM that
folder is gone, the last checkpoint loads, and the run exits 143 with one line.
"""
import os
import pathlib
import signal
import subprocess
import sys
import threading

from gpuemb.train.checkpoint import find_resume, read_state

ROOT = pathlib.Path(__file__).resolve().parents[3]
TRAIN = ROOT / "tools" / "train.py"
CRITEO = ROOT / "tests" / "io" / "data" / "criteo_sample.tsv"


def test_sigterm_removes_the_temporary_folder_and_keeps_the_last_checkpoint(tmp_path):
    tmp, ckpt = tmp_path / "tmp", tmp_path / "ckpt"
    tmp.mkdir()
    args = ["--data", CRITEO, "--format", "criteo", "--store", "ssd", "--cache-rows", "4000", "--steps", "100000",
            "--batch-size", "16", "--eval-every", "100000", "--checkpoint-dir", ckpt, "--checkpoint-every", "1",
            "--no-progress"]
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", "TMPDIR": str(tmp)}
    run = subprocess.Popen([sys.executable, str(TRAIN), *map(str, args)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(300, run.kill)  # a run that never reaches its first checkpoint fails, not hangs
    timer.start()
    try:
        lines = []
        for line in run.stdout:  # the run is under way, in its temporary folder, once a checkpoint is written
            lines.append(line)
            if " checkpoint " in line:
                break
        assert os.listdir(tmp), "the run made no temporary folder"
        run.send_signal(signal.SIGTERM)
        lines += run.stdout.readlines()
        err = run.stderr.read()
        code = run.wait()
    finally:
        timer.cancel()
        run.kill()
    assert code == 143, "".join(lines) + err
    assert "Traceback" not in err and err.strip().splitlines() == [
        "train.py: terminated (SIGTERM); --resume continues from the last checkpoint, if one was written"], err
    assert os.listdir(tmp) == []
    folder, _ = find_resume(str(ckpt))
    assert read_state(folder)["trainer"]["step"] >= 1
