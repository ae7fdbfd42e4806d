"""The folder a conversion writes: one conversion at a time, never on top of another, and every split listed in
its manifest (:mod:`gpuemb.io.dataset_manifest`).

Converting into a folder that holds a data set would leave the old one's shards beside the new ones (a smaller
data set writes fewer part files), and training would read the mix. So a folder whose split folders hold any
``part-*.h5`` or manifest is refused, or, with ``overwrite``, emptied of them first: the shards, manifests and
temp files of every split go, under a lock on the folder and on each split folder, so that two runs do not remove
and write at once.
"""
import glob
import os
import uuid

from gpuemb.io import dataset_manifest as manifest
from gpuemb.io.errors import DataError
from gpuemb.io.shards import ShardWriter, hold_folder

_OLD = ("part-*.h5", "part-*.h5.tmp", manifest.NAME, manifest.NAME + ".tmp")


def _old_files(folder):
    """The files of a data set in split folder ``folder``."""
    return sorted(p for pattern in _OLD for p in glob.glob(os.path.join(glob.escape(folder), pattern)))


class OutputFolder:
    """``with OutputFolder(out, splits, overwrite) as out:`` holds ``out`` for one conversion, whose shards go to
    ``out/<split>`` through ``shard_writer`` and are listed by ``publish`` once written. ``splits``: every split
    name a conversion can write, all of which are checked for an old data set."""

    def __init__(self, path, splits, overwrite=False):
        self.path, self.dataset = os.fspath(path), uuid.uuid4().hex
        self.made = not os.path.isdir(self.path)  # removed again if nothing was written, as after a bad flag
        self.lock = hold_folder(self.path)
        try:
            folders = [os.path.join(self.path, s) for s in splits]
            old = [p for f in folders for p in _old_files(f)]
            if old and not overwrite:
                raise DataError(f"{self.path}: holds an earlier conversion ({len(old)} files, first {old[0]}), "
                                "which new shards would mix with; convert into an empty folder, or give --overwrite "
                                "to replace that data set")
            for folder in folders:
                if os.path.isdir(folder):
                    self._empty(folder)
        except BaseException:
            self.release()
            raise

    @staticmethod
    def _empty(folder):
        lock = hold_folder(folder)
        try:
            for path in _old_files(folder):
                os.remove(path)
        except OSError as e:
            raise DataError(f"{folder}: the earlier conversion's files cannot be removed ({e.strerror}); remove "
                            "them by hand, or convert into another folder") from None
        finally:
            lock.release()
        try:
            os.rmdir(folder)  # a split the new conversion lacks leaves no empty folder to be taken for one
        except OSError:
            pass  # it holds files of someone else's

    def shard_writer(self, split, layout, options):
        """A ShardWriter of ``out/<split>``, whose folder is marked as being written until ``publish``."""
        writer = ShardWriter(os.path.join(self.path, split), layout, options)
        try:
            manifest.write(writer.folder, manifest.Manifest(self.dataset, split, False))
        except DataError:
            writer.close()
            raise
        return writer

    def publish(self, split, writer):
        """List the shards of the closed ``writer`` of ``split`` in its folder's manifest."""
        try:
            entries = tuple(manifest.describe(p, n) for p, n in zip(writer.paths, writer.counts))
        except OSError as e:
            raise DataError(f"{writer.folder}: its shards cannot be read back to be listed ({e.strerror}); check "
                            "the disk, and convert again with --overwrite") from None
        manifest.write(writer.folder, manifest.Manifest(self.dataset, split, True, entries))

    def release(self):
        self.lock.release()
        if self.made:
            try:
                os.rmdir(self.path)
            except OSError:
                pass  # it holds the conversion

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
