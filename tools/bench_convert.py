"""Benchmark of the converter: rows/s converting a generated Criteo raw TSV to HDF5 shards.

    python tools/bench_convert.py [--rows 1000000] [--gzip] [--keep DIR]

The TSV is generated first (not timed): Criteo's 40 fields, about 240 bytes a line like the real files, with
empty dense values and empty tokens sprinkled in. Then the conversion is timed end to end (read, parse, hash,
write) and printed as rows/s. The target is 200k rows/s on a 2-core machine.
"""
import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import numba
import numpy as np

from gpuemb.io.convert import ConvertOptions, convert
from gpuemb.io.criteo import criteo_schema

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


@numba.njit(cache=True)
def _criteo_lines(n, seed):
    """``n`` Criteo-like TSV lines as bytes: labels 1 in 4, counts of a heavy tail, 8-hex-digit tokens."""
    np.random.seed(seed)
    out = np.empty(n * 320, np.uint8)
    digits = np.empty(12, np.uint8)
    p = 0
    for _ in range(n):
        out[p] = 49 if np.random.random() < 0.25 else 48
        p += 1
        for f in range(39):
            out[p] = 9
            p += 1
            if np.random.random() < (0.2 if f < 13 else 0.1):
                continue  # an empty value
            if f >= 13:
                v = np.random.randint(0, 1 << 20) * 2654435761
                for j in range(8):
                    out[p] = _HEX[(v >> (28 - 4 * j)) & 15]
                    p += 1
                continue
            v = int(np.exp(np.random.random() * 9.0)) - 2
            if v < 0:
                out[p] = 45
                p += 1
                v = -v
            k = 0
            while k == 0 or v > 0:
                digits[k] = 48 + v % 10
                v //= 10
                k += 1
            for j in range(k - 1, -1, -1):
                out[p] = digits[j]
                p += 1
        out[p] = 10
        p += 1
    return out[:p]


def write_criteo_tsv(path, rows, seed=0, compress=False):
    """Write ``rows`` generated Criteo lines to ``path`` (gzip when ``compress``), 100k lines at a time."""
    with (gzip.open(path, "wb", compresslevel=1) if compress else open(path, "wb")) as f:
        for i, start in enumerate(range(0, rows, 100_000)):
            f.write(_criteo_lines(min(100_000, rows - start), seed + i).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="lines of the generated TSV (default 1000000)")
    ap.add_argument("--gzip", action="store_true", help="convert a gzip-compressed TSV")
    ap.add_argument("--repeats", type=int, default=3, help="conversions timed; the best is reported (default 3)")
    ap.add_argument("--keep", help="generate into this folder and keep it (else a temporary one)")
    args = ap.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="bench_convert_")
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(folder, f"criteo_{args.rows}.tsv" + (".gz" if args.gzip else ""))
    if not os.path.exists(src):
        t = time.perf_counter()
        write_criteo_tsv(src, args.rows, compress=args.gzip)
        print(f"generated {src}: {os.path.getsize(src) / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s")
    convert([src], os.path.join(folder, "warmup"), criteo_schema(), ConvertOptions())  # compiles numba
    best = None
    try:
        for r in range(args.repeats):
            out = os.path.join(folder, f"shards{r}")
            report = convert([src], out, criteo_schema(), ConvertOptions())
            print(f"run {r}: {report}")
            best = max(best or 0, report.rows_per_s)
            shutil.rmtree(out)
    finally:
        if not args.keep:
            shutil.rmtree(folder)
    print(f"criteo TSV -> HDF5: {best:,.0f} rows/s (best of {args.repeats}, {args.rows:,} rows, "
          f"{os.cpu_count()} cores{', gzip input' if args.gzip else ''})")


if __name__ == "__main__":
    _entry.run(main)
