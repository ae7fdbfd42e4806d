"""tools/train.py --store ssd when the tables' folder cannot serve: taken by another run, full, or not a folder.

Each ends in one line on stderr and a non-zero exit code, and leaves another run's rows as they were.
"""
import os
import pathlib
import resource
import signal
import subprocess
import sys

import numpy as np

from gpuemb.store.slab import SlabAllocator
from gpuemb.store.ssd_tier import SsdTier
from gpuemb.store.tiers import TierSpec

TRAIN = pathlib.Path(__file__).resolve().parents[2] / "tools" / "train.py"
TINY = ["--train-rows", "512", "--steps", "2", "--batch-size", "256", "--eval-rows", "500", "--no-progress",
        "--store", "ssd", "--cache-rows", "8000"]


def train(ssd_dir, preexec_fn=None):
    return subprocess.run([sys.executable, str(TRAIN), *TINY, "--ssd-dir", str(ssd_dir)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "GPUEMB_DEVICE": "cpu"}, preexec_fn=preexec_fn)


def one_line(out, code):
    """The one stderr line of a run that failed with ``code``."""
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    return out.stderr.strip()


def test_a_second_run_on_the_same_ssd_dir_stops_and_leaves_the_first_runs_rows(rng, tmp_path):
    # The first run's table, held open here as that run holds it: the file of DLRM's shared table.
    path = tmp_path / "embeddings.h5"
    spec = TierSpec(width=16, slab_rows=256, chunk_rows=64)
    first = SsdTier(path, spec)
    ids = SlabAllocator(first).alloc(600)
    rows = rng.standard_normal((600, 16)).astype(np.float32)
    first.write(ids, rows)
    first.sync()
    size = path.stat().st_size
    try:
        line = one_line(train(tmp_path), 1)
        assert line == (f"train.py: error: {path}: another run is using this file; give this run another folder "
                        "(tools/train.py --ssd-dir) or wait for that one to end")
        assert path.stat().st_size == size
        np.testing.assert_array_equal(first.read(ids), rows)
    finally:
        first.close()


def full_disk(limit):
    """A file size limit in the child: writes past ``limit`` bytes fail with EFBIG, as on a full disk."""
    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_writes


def test_a_full_disk_is_one_line_and_exit_code_1(tmp_path):
    line = one_line(train(tmp_path, full_disk(1 << 20)), 1)
    assert line.startswith(f"train.py: error: {tmp_path / 'embeddings.h5'}: writing ")
    assert line.endswith(" bytes (a slab of rows) failed (File too large, errno 27); free space on that disk, or put "
                         "the tables' files on a larger one (tools/train.py --ssd-dir)")


def test_an_ssd_dir_that_cannot_hold_files_exits_2_before_training(tmp_path):
    taken = tmp_path / "a-file"
    taken.write_text("not a folder")  # refuses root as well, unlike a folder without write permission
    line = one_line(train(taken), 2)
    assert line == (f"train.py: error: --ssd-dir {taken}: the tables' files cannot be written there (a file of that "
                    "name is there); pass a folder this user can write")
    out = train(taken / "below")
    assert one_line(out, 2) == (f"train.py: error: --ssd-dir {taken / 'below'}: the tables' files cannot be written "
                                "there (Not a directory); pass a folder this user can write")
    assert "training:" not in out.stdout
