"""Convert raw data files to HDF5 shards (layout: gpuemb.io.shards), or write synthetic shards.

    python tools/convert.py criteo day_0.gz day_1.gz --out shards     # a tenth of the rows held out as test
    python tools/convert.py criteo day_0.gz --out shards --split 0.8 0.1 0.1
    python tools/convert.py criteo day_0.gz --test day_23.gz --out shards      # split by file
    python tools/convert.py csv data.csv --label y --dense a b --categorical c d --out shards
    python tools/convert.py parquet part-*.parquet --label y --dense a --categorical c tags --max-bag 64 --out shards
    python tools/convert.py avazu train.csv --out shards --freq-threshold 5
    python tools/convert.py census census-income.data --out shards
    python tools/convert.py synthetic --preset small --rows 1000000 --test-rows 100000 --out shards

A Parquet list column named with --categorical is a jagged feature, a bag of ids a row (docs/data.md, "Parquet").
By default a tenth of the rows go to test/, which tools/train.py --data OUT evaluates on (--split 1 0 0 keeps them
all for training; train.py then needs --eval-data). It prints rows per split, rows/s and the bad lines it skipped
(the first few as file:line: reason). Input that gives no good rows at all is an error (exit 1), as is any other
bad input: one line says what and where. So is an OUT that holds an earlier conversion, which new shards would mix
with: --overwrite replaces it whole.
"""
import argparse
import math
import os
import sys
import warnings

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from gpuemb.first_compile import watching
from gpuemb.io.convert import ConvertOptions, convert
from gpuemb.io.errors import BadLineWarning, DataError
from gpuemb.io.formats import FORMATS, NAMED_COLUMNS, schema_for
from gpuemb.io.reader import ReadOptions
from gpuemb.io.shards import WriteOptions
from gpuemb.io.synthetic import PRESETS, write_synthetic

DEFAULT_SPLIT = (0.9, 0.0, 0.1)
FIRST_COMPILE_S = 20  # the parser's first compile: 16 s of CPU time, measured on the 2-core machine


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("format", choices=(*FORMATS, "synthetic"), help="how to read the inputs, or synthetic rows")
    ap.add_argument("inputs", nargs="*", help="input files (train, or all rows for a ratio split)")
    ap.add_argument("--out", required=True, help="output folder; shards go to OUT/<split>/part-*.h5, listed in "
                    "OUT/<split>/manifest.json")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace the data set OUT already holds: its shards and manifests of every split are removed "
                    "first (without it, converting into a folder that holds one is refused)")
    ap.add_argument("--val", nargs="+", default=[], help="files of the val split (split by file)")
    ap.add_argument("--test", nargs="+", default=[], help="files of the test split (split by file)")
    # a tenth held out, as tools/train.py holds out of raw files it converts itself (--eval-fraction 0.1)
    ap.add_argument("--split", nargs=3, type=float, default=DEFAULT_SPLIT, metavar=("TRAIN", "VAL", "TEST"),
                    help="ratios of the rows that go to each split, summing to 1, when no --val or --test files are "
                    "given (default: 0.9 0 0.1, a tenth held out as test, which train.py evaluates on; 1 0 0 "
                    "holds none out)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the hash that assigns rows to splits (default: 0)")
    ap.add_argument("--freq-threshold", type=int, default=0,
                    help="ids seen fewer times than this in the train rows become one rare id per column (default: "
                    "0, keep every id)")
    ap.add_argument("--cap", type=int, nargs="+", default=[0], help="one cap for all columns, or one per column")
    ap.add_argument("--no-log1p", action="store_true", help="keep dense values as they are")
    ap.add_argument("--strict", action="store_true", help="stop at the first bad line")
    ap.add_argument("--soft-labels", action="store_true",
                    help="labels may be any value in [0, 1], not only 0 or 1 (another is a bad line either way)")
    ap.add_argument("--chunk-rows", type=int, default=16384,
                    help="rows in each HDF5 chunk, what a read or a CRC covers (default: %(default)s)")
    ap.add_argument("--rows-per-shard", type=int, default=1 << 21,
                    help="rows in each part file, a multiple of --chunk-rows (default: %(default)s)")
    ap.add_argument("--compression", choices=("gzip",), default=None,
                    help="compress the chunks: smaller shards, slower reads (default: none)")
    named = ap.add_argument_group(", ".join(NAMED_COLUMNS), "the columns of each role, named")
    named.add_argument("--label", nargs="+", default=[], help="the label columns, one a task")
    named.add_argument("--dense", nargs="+", default=[], help="the numeric feature columns")
    named.add_argument("--categorical", nargs="+", default=[],
                       help="the id feature columns (a Parquet list column: a bag of ids a row)")
    named.add_argument("--kind", choices=("str", "hex", "int"), default="str",
                       help="how string tokens become ids (a Parquet int column is always read as int)")
    named.add_argument("--delimiter", default=",", help="csv only")
    named.add_argument("--max-bag", type=int, default=None,
                       help="parquet: most ids in a row of a list column; a longer bag is a bad row (default: no cap)")
    syn = ap.add_argument_group("synthetic")
    syn.add_argument("--preset", choices=sorted(PRESETS), default="small",
                     help="the shape of the data: its tables, hotness and teacher (default: small)")
    syn.add_argument("--rows", type=int, default=1_000_000, help="training rows to write (default: %(default)s)")
    syn.add_argument("--test-rows", type=int, default=100_000,
                     help="held-out rows to write to test/, 0 for none (default: %(default)s)")
    args = ap.parse_args(argv)
    problem = bad_flags(args)
    if problem:
        ap.error(problem)
    return args


def bad_flags(args):
    """What is wrong with the flags, as one line naming them, or None. The library checks the same (WriteOptions,
    ConvertOptions, the caps against the columns), but in its own words; these are the user's."""
    if args.chunk_rows < 1:
        return f"--chunk-rows {args.chunk_rows}: give a positive number of rows per chunk"
    if args.rows_per_shard < 1 or args.rows_per_shard % args.chunk_rows:
        return (f"--rows-per-shard {args.rows_per_shard}: a shard holds whole chunks, so give a positive multiple of "
                f"--chunk-rows ({args.chunk_rows})")
    if not all(math.isfinite(r) and r >= 0 for r in args.split) or not math.isclose(sum(args.split), 1.0):
        return (f"--split {' '.join(map(str, args.split))}: give three ratios >= 0 (train, val, test) that sum to 1, "
                "such as 0.9 0.05 0.05")
    if any(c < 0 for c in args.cap):
        return f"--cap {' '.join(map(str, args.cap))}: a cap is a row count >= 0 (0: no cap)"
    if args.freq_threshold < 0:
        return f"--freq-threshold {args.freq_threshold}: give a count >= 0 (0 keeps every id)"
    if args.max_bag is not None and args.max_bag < 0:
        return f"--max-bag {args.max_bag}: give the most ids a bag keeps, >= 0 (leave it out for no cap)"
    if args.format == "synthetic" and (args.rows < 1 or args.test_rows < 0):
        return f"--rows {args.rows} --test-rows {args.test_rows}: give at least one training row, and test rows >= 0"
    return None


def schema_of(args):
    if args.format not in NAMED_COLUMNS:
        return schema_for(args.format, args.inputs)
    return schema_for(args.format, args.inputs, label=args.label, dense=args.dense, categorical=args.categorical,
                      kind=args.kind, delimiter=args.delimiter)


def report_lines(report, compiling, held_out_by):
    """The rows of each split, and what was held out for train.py; then the time and rate, which leave out what
    numba spent compiling the parser (the first run's, over most of its time on a small file)."""
    rows = ", ".join(f"{split}: {n:,} rows" for split, n in report.rows.items()) or "no rows"
    if report.rows.get("test") or report.rows.get("val"):
        rows += f" (held out by {held_out_by}; train.py evaluates on {'test' if report.rows.get('test') else 'val'})"
    else:
        rows += " (none held out: train.py --data needs --eval-data, or convert with --split 0.9 0 0.1)"
    working = max(report.seconds - compiling, 1e-9)
    rate = f"{sum(report.rows.values()) / working:,.0f} rows/s"
    if compiling >= 0.1:
        rate += f", leaving out {compiling:.1f} s of compiling the parser"
    return [rows, f"converted in {report.seconds:.2f} s ({rate}); {report.parse.summary()}"]


def main(argv=None):
    args = parse_args(argv)
    write = WriteOptions(args.chunk_rows, args.rows_per_shard, args.compression)
    if args.format == "synthetic":
        rows = {"train": args.rows, "test": args.test_rows} if args.test_rows else {"train": args.rows}
        try:
            written = write_synthetic(PRESETS[args.preset], args.out, rows, write, overwrite=args.overwrite)
        except DataError as e:  # a full disk, or OUT holding another conversion
            print(f"convert.py: {e}", file=sys.stderr)
            return 1
        for split, (paths, auc) in written.items():
            print(f"{split}: {rows[split]} rows in {len(paths)} shards; teacher AUC {auc:.4f}")
        return 0
    if not args.inputs:
        print(f"convert.py: {args.format} needs input files", file=sys.stderr)
        return 2
    inputs = args.inputs
    if args.val or args.test:
        inputs = {"train": args.inputs, **({"val": args.val} if args.val else {}),
                  **({"test": args.test} if args.test else {})}
    read = ReadOptions(dense_log1p=not args.no_log1p, strict=args.strict, soft_labels=args.soft_labels)
    options = ConvertOptions(tuple(args.split), args.seed, args.freq_threshold,
                             args.cap[0] if len(args.cap) == 1 else tuple(args.cap), read, write, args.max_bag)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BadLineWarning)  # the report below lists them, once each
            with watching(lambda line: print(line, flush=True), FIRST_COMPILE_S) as compiling:
                report = convert(inputs, args.out, schema_of(args), options, overwrite=args.overwrite)
    except DataError as e:
        print(f"convert.py: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # what only the data can show wrong in the flags: --cap's count against the columns
        print(f"convert.py: {e}", file=sys.stderr)
        return 2
    for line in report_lines(report, compiling.seconds, "files" if args.val or args.test else "--split"):
        print(line)
    for bad in report.parse.first_bad:
        print(f"  skipped {bad}")
    return 0


if __name__ == "__main__":
    _entry.run(main)
