"""The checkpoint dir: one run at a time writes it, and what dead runs left half-written there is cleared.

``<checkpoint-dir>`` holds complete checkpoints ``step-<N>`` (a folder without its manifest is not one), ``latest``
(the name of the newest), and the leftovers of a write or prune that did not finish, each named with a leading
dot: ``.step-<N>.tmp-*`` (a checkpoint being written), ``.step-<N>.old-*`` (one being replaced or pruned: it is
renamed away before it is removed, so an interrupted prune never leaves a ``step-<N>`` that looks complete but is
not) and ``.latest.tmp-*``. The run writing there holds a flock on the folder for its lifetime (``DirLock``), so any
leftover it finds is a dead run's: it clears them at its start.
"""
import os
import re
import shutil
import uuid

from gpuemb.io import file_lock

from .errors import CheckpointError

MANIFEST, LATEST = "manifest.json", "latest"
STEP = re.compile(r"step-(\d+)")
LEFTOVER = re.compile(r"\.(step-\d+\.(tmp|old)|latest\.tmp)-.*")


def step_folders(directory):
    """The ``step-<N>`` names in ``directory``, newest first."""
    found = [n for n in os.listdir(directory) if STEP.fullmatch(n) and os.path.isdir(os.path.join(directory, n))]
    return sorted(found, key=lambda n: int(STEP.fullmatch(n)[1]), reverse=True)


def latest_name(directory):
    """The name ``latest`` holds, or None where there is no such file or it cannot be read as one."""
    try:
        with open(os.path.join(directory, LATEST), "rb") as f:
            name = f.read(256).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if STEP.fullmatch(name) else None


class DirLock(file_lock.DirLock):
    """The lock a run holds on its checkpoint dir (``io/file_lock.py``); a second run is refused with one line.
    ``DirLock(None)`` holds nothing (a run without a checkpoint dir, or not rank 0)."""

    def __init__(self, directory=None):
        try:
            super().__init__(directory)
        except file_lock.Busy:
            raise CheckpointError(f"--checkpoint-dir {directory}: another run is writing checkpoints there, and two "
                                  "runs would overwrite each other's; wait for it to end, or pass another "
                                  "--checkpoint-dir") from None
        except OSError as e:
            raise CheckpointError(f"--checkpoint-dir {directory}: cannot be opened for this run ({e.strerror}); "
                                  "pass a --checkpoint-dir in a writable place") from None


def clear_leftovers(directory):
    """Remove what dead runs left in ``directory`` (call it holding the DirLock): temp and old folders, temp
    ``latest`` files, and ``step-<N>`` folders without a manifest that ``latest`` does not name. Returns their
    names."""
    named = latest_name(directory)
    gone = [n for n in sorted(os.listdir(directory)) if LEFTOVER.fullmatch(n) or (
        STEP.fullmatch(n) and n != named and not os.path.isfile(os.path.join(directory, n, MANIFEST)))]
    for n in gone:
        path = os.path.join(directory, n)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
    return gone


def remove_folder(directory, name):
    """Remove checkpoint ``name``: renamed away first, so that a removal cut short leaves a leftover, never a
    ``step-<N>`` that looks complete."""
    old = os.path.join(directory, f".{name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(os.path.join(directory, name), old)
    shutil.rmtree(old, ignore_errors=True)
