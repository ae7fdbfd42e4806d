"""The SSD tier's file under another run and under a full disk: one clear error, and no harm to the rows."""
import errno
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpuemb.store.errors import SsdFileError
from gpuemb.store.slab import SlabAllocator
from gpuemb.store.ssd_tier import SsdTier
from gpuemb.store.tiers import TierSpec

SPEC = TierSpec(width=8, slab_rows=64, chunk_rows=16)


def python(code, **env):
    """Run ``code`` in a fresh interpreter on the CPU: another process, as a second run is."""
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def filled(path, rng, n=100):
    """An open tier at ``path`` holding ``n`` random rows, with their ids and values."""
    t = SsdTier(path, SPEC)
    ids = SlabAllocator(t).alloc(n)
    ref = rng.standard_normal((n, SPEC.width)).astype(np.float32)
    t.write(ids, ref)
    t.sync()  # the rows are in the file, for another process to find
    return t, ids, ref


OPEN = """
    from gpuemb.store.errors import SsdFileError
    from gpuemb.store.ssd_tier import SsdTier
    from gpuemb.store.tiers import TierSpec
    try:
        SsdTier({path!r}, TierSpec(width=8)).close()
    except SsdFileError as e:
        print(e)
    else:
        print("opened")
"""


# HDF5_USE_FILE_LOCKING=FALSE, as clusters set it: HDF5 alone then lets the second run in without a word
@pytest.mark.parametrize("env", [{}, {"HDF5_USE_FILE_LOCKING": "FALSE"}], ids=["hdf5-locks", "hdf5-locks-off"])
def test_a_second_process_is_refused_and_the_rows_stay(rng, tmp_path, env):
    path = tmp_path / "rows.h5"
    t, ids, ref = filled(path, rng)
    size = path.stat().st_size
    out = python(OPEN.format(path=str(path)), **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"{path}: another run is using this file; give this run another folder "
                                  "(tools/train.py --ssd-dir) or wait for that one to end")
    assert path.stat().st_size == size  # h5py's "w" truncated it to 0 before HDF5's own lock refused it
    np.testing.assert_array_equal(t.read(ids), ref)
    t.close()
    assert not (tmp_path / "rows.h5.lock").exists()
    assert python(OPEN.format(path=str(path))).stdout.strip() == "opened"  # closing let go of it


def test_a_second_tier_in_this_process_is_refused_too(rng, tmp_path):
    t, ids, ref = filled(tmp_path / "rows.h5", rng)
    with pytest.raises(SsdFileError, match="another run is using this file"):
        SsdTier(tmp_path / "rows.h5", SPEC)
    np.testing.assert_array_equal(t.read(ids), ref)
    t.close()
    SsdTier(tmp_path / "rows.h5", SPEC).close()


def test_a_killed_holder_blocks_no_one(rng, tmp_path):
    path = tmp_path / "rows.h5"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from gpuemb.store.ssd_tier import SsdTier
        from gpuemb.store.tiers import TierSpec
        t = SsdTier({str(path)!r}, TierSpec(width=8))
        print("holding", flush=True)
        time.sleep(120)
    """)], env={**os.environ, "GPUEMB_DEVICE": "cpu"}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(SsdFileError, match="another run is using this file"):
            SsdTier(path, SPEC)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    assert (tmp_path / "rows.h5.lock").exists()  # left behind by the killed run, but no longer locked
    t, ids, ref = filled(path, rng)
    np.testing.assert_array_equal(t.read(ids), ref)
    t.close()


FULL_DISK = """
    import resource, signal
    import numpy as np
    from gpuemb.store.errors import SsdFileError
    from gpuemb.store.slab import SlabAllocator
    from gpuemb.store.ssd_tier import SsdTier
    from gpuemb.store.tiers import TierSpec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    t = SsdTier({path!r}, TierSpec(width=16, slab_rows=1024, chunk_rows=64))
    alloc, rng = SlabAllocator(t), np.random.default_rng(0)
    try:
        for _ in range(100):
            t.write(alloc.alloc(1024), rng.random((1024, 16), dtype=np.float32))
    except SsdFileError as e:
        print(e)
        for again in (lambda: t.write(np.arange(3), np.ones((3, 16), np.float32)), lambda: t.read(np.arange(3)),
                      t.add_slab):
            try:
                again()
            except SsdFileError as later:
                print("again:", later is e)
    t.close()
    t.close()
    print("closed")
"""


def test_a_full_disk_is_one_line_naming_the_file_and_what_to_do(tmp_path):
    path = tmp_path / "rows.h5"
    out = python(FULL_DISK.format(limit=200_000, path=str(path)))
    assert out.returncode == 0, out.stderr  # no segfault, nothing raised by close()
    lines = out.stdout.splitlines()
    assert lines[0] == (f"{path}: writing 69,632 bytes (a slab of rows) failed (File too large, errno 27); free "
                        "space on that disk, or put the tables' files on a larger one (tools/train.py --ssd-dir)")
    assert lines[1:] == ["again: True"] * 3 + ["closed"], out.stdout
    assert out.stderr == "" and not (tmp_path / "rows.h5.lock").exists()


def test_a_failed_row_write_is_one_line_and_closes_quietly(rng, tmp_path, monkeypatch):
    t, ids, ref = filled(tmp_path / "rows.h5", rng)
    t.sync()

    def full(fd, buffers, offset):  # as a full disk fails a write
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(SsdFileError) as e:  # the write goes in the background: the error comes by the sync
        t.write(ids[:5], ref[:5] + 1)
        t.sync()
    assert str(e.value) == (f"{tmp_path / 'rows.h5'}: writing rows back in the background failed (No space left on "
                            "device, errno 28); free space on that disk, or put the tables' files on a larger one "
                            "(tools/train.py --ssd-dir)")
    with pytest.raises(SsdFileError) as again:
        t.read(ids)
    assert again.value is e.value
    t.close()
    SsdTier(tmp_path / "rows.h5", SPEC).close()  # the lock went with it
