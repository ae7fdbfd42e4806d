"""Train each model a few steps on the chosen device, in one process: does every model run there, what does its
first step cost (compiling the kernels, planning the matmuls), and what does a step cost the host.

    GPUEMB_DEVICE=cuda python3 tools/gpu_steps.py [--cases NAME ...] [--batch 16] [--steps 5] [--json FILE]
                                                  [--profile N]

At batch 16 a step's kernels take microseconds on a GPU, so its time is what the host pays to issue them:
the figure that ``tools/count_step.py``'s counts predict (docs/perf/README.md). Each case is count_step.py's
tiny model (rows of dim 8, MLPs of width 16) on synthetic data, trained by the same Pipeline as
``tools/train.py`` (its prefetch worker on). A case that fails prints its error and the others still run; the
exit code is the number that failed. Per case: the first step's seconds, the median milliseconds of the next
``--steps`` (each waited out on the device), the reads back per step that the backend counted (on a real GPU
only its explicit ones, autograd/launches.py), and the last loss, which must be finite. ``--profile N``: also
cProfile the timed steps of each case and print the N functions with the most time of their own: where a step's
host time goes, which the first GPU run could only estimate (docs/perf/README.md).
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from count_step import CASES as COUNTED, DCN, DLRM, Case, open_run  # noqa: E402

CASES = {
    **{name: COUNTED[name] for name in ("dlrm-shared", "dlrm-26", "dcn-multihot", "dlrm-host")},
    "dcn": Case("DCN-v2 on the quick preset's 26 features, a table each", {**DCN, "tables": "per-feature"}),
    **{model: Case(f"{model} on the quick preset, one shared table", {"model": model})
       for model in ("deepfm", "xdeepfm", "pnn", "wide_deep")},
    "dlrm-bf16": Case("DLRM, 26 features, a table each, --precision bf16",
                      {**DLRM, "tables": "per-feature", "precision": "bf16"}),
    "dlrm-tf32": Case("DLRM, 26 features, a table each, --precision tf32",
                      {**DLRM, "tables": "per-feature", "precision": "tf32"}),
    "dcn-bf16": Case("DCN-v2, 26 features, a table each, --precision bf16 (the cross layers too)",
                     {**DCN, "tables": "per-feature", "precision": "bf16"}),
}


def run_case(case, batch, steps, profile=0):
    from gpuemb.autograd import backend, launches

    start = time.perf_counter()
    run = open_run(case, batch, steps + 1)
    try:
        with run.pipeline as pipeline:
            loss = pipeline.step()
            backend.synchronize()
            first = time.perf_counter() - start
            times, before = [], launches.COUNTS.snapshot()
            profiler = cProfile.Profile() if profile else None
            for _ in range(steps):
                t0 = time.perf_counter()
                if profiler:
                    profiler.enable()
                loss = pipeline.step()
                backend.synchronize()
                if profiler:
                    profiler.disable()
                times.append(time.perf_counter() - t0)
            readbacks = launches.COUNTS.since(before)["readbacks"] / steps
    finally:
        run.close()
    loss = float(backend.to_host(loss)) if hasattr(loss, "shape") else float(loss)
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss}")
    row = {"about": case.about, "first_step_s": round(first, 3),
           "ms_per_step": round(statistics.median(times) * 1e3, 3), "readbacks_per_step": readbacks, "loss": loss}
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile)
        row["profile"] = text.getvalue()
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), metavar="NAME",
                    help=f"the cases (default all: {', '.join(CASES)})")
    ap.add_argument("--batch", type=int, default=16, help="samples per step (default 16)")
    ap.add_argument("--steps", type=int, default=5, help="steps timed after the first (default 5)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="cProfile the timed steps; print the N functions with the most time of their own")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.profile < 0:
        ap.error("--batch and --steps must be at least 1, --profile at least 0")
    from gpuemb.autograd import backend
    print(f"device: {backend.device_info()}", flush=True)
    print(f"{'case':<14}{'first step s':>14}{'ms/step':>10}{'readbacks':>11}{'loss':>9}", flush=True)
    rows, failed = {}, 0
    for name in args.cases:
        try:
            rows[name] = r = run_case(CASES[name], args.batch, args.steps, args.profile)
            print(f"{name:<14}{r['first_step_s']:>14.2f}{r['ms_per_step']:>10.2f}{r['readbacks_per_step']:>11g}"
                  f"{r['loss']:>9.4f}", flush=True)
            if "profile" in r:
                print(r["profile"], flush=True)
        except Exception as e:  # the report goes on to the next model, and says what broke
            failed += 1
            rows[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
            print(f"{name:<14} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            print(traceback.format_exc()[-1500:], file=sys.stderr, flush=True)
    from gpuemb.kernels.mlp import PLANS
    refused = sorted({f"{p[0]} {p[1] or 'default'}" for p in PLANS.refused})
    print(f"epilogs cuBLASLt refused (a plain matmul and a kernel ran instead): {', '.join(refused) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": backend.device_info(), "batch": args.batch,
                                               "steps": args.steps, "cases": rows, "refused": refused}, indent=1))
    return failed


if __name__ == "__main__":
    _entry.run(main)
