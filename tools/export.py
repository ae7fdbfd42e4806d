"""Write an inference bundle from a training checkpoint: the dense part as ONNX, the tables as HDF5 rows, a
manifest (docs/serve.md).

    python tools/export.py ckpt/step-000000800 --out bundle              # fp32 rows
    python tools/export.py ckpt --out bundle-int8 --rows int8            # a checkpoint dir: the one `latest` names

Then ``gpuemb.serve.Predictor("bundle").predict(dense, sparse)``.
"""
import argparse
import os
import sys

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from gpuemb.serve.rows import FORMATS


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "), prog="export.py")
    p.add_argument("checkpoint", help="a step-* checkpoint folder, or a --checkpoint-dir (its latest checkpoint)")
    p.add_argument("--out", required=True, help="the bundle's folder (made if missing)")
    p.add_argument("--rows", default="fp32", choices=FORMATS, help="how the tables' weights are stored")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)  # argparse exits 2 with one line on a bad flag
    from gpuemb.serve.bundle import write_bundle
    from gpuemb.serve.checkpoint import load_export
    from gpuemb.serve.manifest import is_bundle
    from gpuemb.train.checkpoint import find_resume
    from gpuemb.train.errors import TrainError
    try:
        if is_bundle(args.checkpoint):  # its manifest is not a checkpoint's, which would read as a corrupt one
            raise ValueError(f"{args.checkpoint} is an inference bundle, not a checkpoint; give the step-* folder "
                             "or the --checkpoint-dir that tools/train.py wrote")
        folder, _ = find_resume(args.checkpoint)
        got = load_export(folder)  # a snapshot's rows are read a chunk at a time, not loaded into the model
        body = write_bundle(got["model"], args.out, args.rows, got["names"], got["hotness"], got["sources"],
                            got["origin"])
    except (TrainError, ValueError, OSError) as e:
        print(f"export.py: error: {e}", file=sys.stderr)
        return 1
    size = sum(f["bytes"] for f in body["files"].values())
    print(f"export.py: {folder} -> {os.path.abspath(args.out)} ({body['model']}, {args.rows} rows, "
          f"{sum(t['n_rows'] for t in body['tables'].values()):,} rows, {size:,} bytes)")
    return 0


if __name__ == "__main__":
    _entry.run(main)
