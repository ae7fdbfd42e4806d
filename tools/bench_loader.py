"""Benchmark of the loader on W ranks: what each rank reads, makes and stages for its part of the global batches.

    python tools/bench_loader.py [--data synthetic|shards] [--world-sizes 1 2 4] [--batch-size 4096] [--rows N]
                                 [--eval]

The data is tools/train.py's default: the synthetic 'quick' rows, made as they are read, or (``--data shards``)
the same rows written first (not timed) as HDF5 shards in a temporary folder, chunks of 16,384 rows. For each
world size W, the loader of each rank r (``LoaderConfig(rank=r, world_size=W)``) runs in turn in this process for
one epoch of global batches of ``--batch-size`` rows, shuffled as train.py shuffles them (a whole epoch, since a
loader reads a window of 8 blocks at a time); with ``--eval``, read as evaluation reads them (in file order, the
last batch kept, padded to a row a rank). Its counts are those of rank r in an ``mpiexec -n W`` launch; its
time is the rank's alone, with the cores to itself. Prints a table, a row per rank: the rows it yielded, the
blocks it read, the rows it read (shards: whole chunks) or made (synthetic), their MB, its seconds, and its
milliseconds a global batch.
"""
import argparse
import os
import sys
import tempfile
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.io.shards import ShardSource
from gpuemb.io.synthetic import SyntheticSource, write_synthetic
from gpuemb.train.data import QUICK


def run_rank(source, batch_size, rank, world_size, eval_=False):
    """The stats of rank ``rank``'s loader over one epoch, and its seconds."""
    order = {"shuffle": False, "drop_last": False, "pad_to": world_size} if eval_ else {}
    loader = Loader(source, LoaderConfig(batch_size, seed=0, rank=rank, world_size=world_size, **order))
    start = time.perf_counter()
    for _ in loader:
        pass
    return loader.stats(), time.perf_counter() - start


def table(source, args):
    next(iter(Loader(source, LoaderConfig(args.batch_size))))  # compiles numba's kernels
    print("| W | rank | rows yielded | blocks read | rows read or made | MB read | s | ms a global batch |")
    print("|---|---|---|---|---|---|---|---|")
    for W in args.world_sizes:
        for r in range(W):
            s, seconds = run_rank(source, args.batch_size, r, W, args.eval)
            print(f"| {W} | {r} | {s['rows']:,} | {s['blocks_read']:,} | {s['rows_read']:,} | "
                  f"{s['bytes_read'] / 1e6:,.1f} | {seconds:.2f} | {1e3 * seconds / s['batches']:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", choices=("synthetic", "shards"), default="synthetic",
                    help="rows made as they are read, or written first as HDF5 shards (default synthetic)")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4], help="the W to run (default 1 2 4)")
    ap.add_argument("--batch-size", type=int, default=4096, help="the global batch (default 4096)")
    ap.add_argument("--rows", type=int, default=1 << 20, help="rows of the data, an epoch (default 1048576)")
    ap.add_argument("--eval", action="store_true", help="read as evaluation does: in file order, unshuffled, the "
                    "last batch kept and padded to a row a rank (Cluster.eval_pad)")
    args = ap.parse_args()
    if min(args.world_sizes) < 1 or args.batch_size < max(args.world_sizes) or args.batch_size > args.rows:
        ap.error("--world-sizes must be >= 1, and --batch-size at least the largest of them and at most --rows")
    if args.data == "synthetic":
        return table(SyntheticSource(QUICK, args.rows, "train"), args)
    with tempfile.TemporaryDirectory(prefix="bench_loader_") as folder:
        paths = write_synthetic(QUICK, folder, {"train": args.rows})["train"][0]
        with ShardSource(paths) as source:
            table(source, args)


if __name__ == "__main__":
    _entry.run(main)
