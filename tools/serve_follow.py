"""Follow a training run with a bundle: apply the deltas of its --delta-dir in order as they appear (docs/serve.md,
"Following a training run").

    python tools/train.py --checkpoint-dir ckpt --checkpoint-every 800 --delta-every 100 --delta-dir deltas
    python tools/export.py ckpt/step-000000800 --out bundle
    python tools/serve_follow.py bundle deltas      # a line per delta applied from the bundle's step; Ctrl-C ends it

It polls the folder's index and applies each new delta, from the one that starts at the bundle's step; a delta refused
(out of order, after a gap, of another run, damaged) is one line, and the Predictor keeps what it served.
"""
import argparse
import os
import sys
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "), prog="serve_follow.py")
    p.add_argument("bundle", help="the bundle's folder (tools/export.py --out)")
    p.add_argument("delta_dir", help="the training run's --delta-dir")
    p.add_argument("--from-step", type=int, default=None,
                   help="the step of the checkpoint the bundle was exported from, where the first delta starts "
                        "(default: the step its manifest records)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between looks at the folder's index")
    p.add_argument("--once", action="store_true", help="apply the deltas there now, then exit")
    p.add_argument("--host-cache-rows", type=int, default=None,
                   help="read rows from the bundle's file through an LRU of this many rows per table (default: "
                        "load every row)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)  # argparse exits 2 with one line on a bad flag
    from gpuemb.serve import BundleError, Predictor
    from gpuemb.serve.delta_chain import read_index, table_files
    try:
        with Predictor(args.bundle, args.host_cache_rows, from_step=args.from_step) as p:
            if p.step is None:
                raise BundleError(f"{args.bundle}: records no checkpoint step (exported before bundles did); give "
                                  "--from-step, the step of the checkpoint it was exported from")
            while True:
                _, entries = read_index(args.delta_dir)
                for e in (e for e in entries if e["since"] >= p.step):
                    path = os.path.join(args.delta_dir, table_files(e)[0]["file"])  # rank 0's of a sharded run
                    t = time.perf_counter()
                    p.apply_delta(path)
                    print(f"step {p.step}: applied {path} ({time.perf_counter() - t:.2f} s)", flush=True)
                if args.once:
                    return 0
                time.sleep(args.poll)
    except BundleError as e:
        print(f"serve_follow.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    _entry.run(main)
