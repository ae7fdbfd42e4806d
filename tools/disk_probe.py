"""Random-read IOPS of a disk, measured through the path the SSD tier uses: buffered ``os.preadv`` from threads.

    python tools/disk_probe.py FILE [--block-bytes 16640] [--qd 1 16] [--seconds 5]

``queue_depth`` threads each read one ``block_bytes`` block at a time at block-aligned random offsets of an
existing ``FILE`` (``os.preadv`` releases the GIL, so the reads are in flight together). The reads are buffered,
not O_DIRECT, as the tier's are: so the ceiling this gives is the one the tier can reach, and the SSD tier's chunk
rate is compared with it (``tools/bench_store_beyond_ram.py``). A file smaller than the RAM may be answered by the
page cache rather than the disk; the CLI says so, and for the disk's own rate the file should be larger than RAM.
"""
import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import numpy as np


def page_cache_note(path):
    """A sentence when ``path`` is smaller than the RAM (its reads may come from the page cache), else None."""
    size, ram = os.path.getsize(path), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if size >= ram:
        return None
    return (f"{path} ({size / 1e9:.2f} GB) is smaller than the RAM ({ram / 1e9:.1f} GB): the page cache may answer "
            "its reads, not the disk; probe a file larger than the RAM for the disk's own rate")


def random_read_iops(path, block_bytes, queue_depth, seconds=5.0, seed=0):
    """Random reads of ``block_bytes`` at block-aligned offsets of ``path`` from ``queue_depth`` threads for about
    ``seconds``: a dict of iops, MB/s, mean latency (us), reads, seconds, queue_depth and block_bytes."""
    size = os.path.getsize(path)
    if block_bytes < 1 or queue_depth < 1:
        raise ValueError(f"random_read_iops: block_bytes={block_bytes} and queue_depth={queue_depth} must be >= 1")
    blocks = size // block_bytes
    if blocks < 1:
        raise ValueError(f"random_read_iops: {path} is {size} bytes, smaller than one block of {block_bytes} bytes; "
                         "use a larger file or a smaller block")
    reads, waited = [0] * queue_depth, [0.0] * queue_depth
    start = threading.Barrier(queue_depth + 1, timeout=60)  # every reader starts together

    def reader(fd, i):
        rng, buf = np.random.default_rng([seed, i]), bytearray(block_bytes)
        start.wait()
        deadline = time.perf_counter() + seconds
        while True:
            for offset in (rng.integers(0, blocks, 256) * block_bytes).tolist():
                t = time.perf_counter()
                if os.preadv(fd, [buf], offset) != block_bytes:
                    raise OSError(f"random_read_iops: short read of {path} at byte {offset}")
                now = time.perf_counter()
                waited[i] += now - t
                reads[i] += 1
                if now >= deadline:
                    return

    fd = os.open(path, os.O_RDONLY)
    try:
        with ThreadPoolExecutor(queue_depth) as pool:
            jobs = [pool.submit(reader, fd, i) for i in range(queue_depth)]
            start.wait()
            t0 = time.perf_counter()
            for job in jobs:
                job.result()
            wall = time.perf_counter() - t0
    finally:
        os.close(fd)
    n = sum(reads)
    return {"iops": n / wall, "MB/s": n * block_bytes / wall / 1e6, "mean_latency_us": 1e6 * sum(waited) / n,
            "reads": n, "seconds": wall, "queue_depth": queue_depth, "block_bytes": block_bytes}


def print_probes(probes):
    print(f"{'queue depth':>11}  {'IOPS':>10}  {'MB/s':>8}  {'mean latency us':>15}  {'reads':>9}")
    for p in probes:
        print(f"{p['queue_depth']:>11}  {p['iops']:>10,.0f}  {p['MB/s']:>8,.1f}  {p['mean_latency_us']:>15,.1f}  "
              f"{p['reads']:>9,}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="an existing file to read (larger than the RAM for the disk's own rate)")
    ap.add_argument("--block-bytes", type=int, default=64 * 260, help="bytes a read (default 16640: a chunk of "
                    "64 rows of 260 B, the beyond-RAM table's)")
    ap.add_argument("--qd", type=int, nargs="+", default=[1, 16], help="queue depths (default 1 16)")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per queue depth (default 5)")
    args = ap.parse_args(argv)
    try:
        probes = [random_read_iops(args.file, args.block_bytes, qd, args.seconds) for qd in args.qd]
    except (OSError, ValueError) as e:
        raise SystemExit(f"disk_probe: {e}")
    print(f"random reads of {args.block_bytes:,} B from {args.file}, {args.seconds:g} s each")
    print_probes(probes)
    note = page_cache_note(args.file)
    if note:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    _entry.run(main)
