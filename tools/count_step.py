"""What one training step launches and reads back on a GPU, phase by phase, counted on the emulated device.

    python tools/count_step.py [--cases NAME ...] [--steps 1] [--warmup 2] [--batch 16] [--json FILE]

Each case trains a tiny model (rows of dim 8, MLPs of width 16) on synthetic data under ``GPUEMB_DEVICE=emulated``
with numba's simulator, which the tool sets for itself. After ``--warmup`` steps (the tables size their tiers,
the MLPs plan their matmuls, a cache fills) it counts ``--steps`` steps and prints their mean per step by phase
(autograd/launches.py says what each count is): numba kernel launches, CuPy calls that launch work, calls
into cuBLASLt, the launches of all three, and the reads back at which the host waits for the device. The next
batch's prefetch counts as ``prefetch``: it runs in the step, where the pipeline's worker thread would start it,
so that the counts do not depend on how two threads interleave. They are exact, not times; the widths are tiny
because the simulator runs a kernel one thread at a time, and what a step launches follows its tables, features
and layers more than their sizes.

Cases: ``dlrm-13``, ``dlrm-26`` and ``dlrm-52`` (DLRM, that many sparse features, a table each), ``dlrm-shared``
(DLRM, 26 features in one shared table), ``dcn-multihot`` (DCN-v2, low-rank crosses, over 26 tables of MLPerf's
multi-hot features, 214 ids a row) and ``dcn-multihot-13`` (its first 13), ``dlrm-host`` (DLRM, 26 tables, each
on the host store behind a device cache of ``CACHE_ROWS`` rows) and ``dlrm-host-13``.
"""
import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass, field, replace

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

DIM, CACHE_ROWS = 8, 64
DLRM = {"model": "dlrm", "model_args": {"bottom": [16], "top": [16]}}
DCN = {"model": "dcn", "model_args": {"bottom": [16, DIM], "n_cross": 2, "rank": 4, "deep": [16]}}
COLUMNS = ("numba", "cupy", "cublaslt", "launches", "readbacks")


@dataclass(frozen=True)
class Case:
    """A model and its data: ``settings`` over the tool's TrainConfig, on its ``--preset``'s synthetic data (26
    features) or, given ``features``, on that many features of the quick preset's cardinalities (repeated past
    26)."""
    about: str
    settings: dict = field(default_factory=dict)
    features: int = None


CASES = {
    "dlrm-13": Case("DLRM, 13 sparse features, a table each", {**DLRM, "tables": "per-feature"}, features=13),
    "dlrm-26": Case("DLRM, 26 sparse features, a table each", {**DLRM, "tables": "per-feature"}),
    "dlrm-52": Case("DLRM, 52 sparse features, a table each", {**DLRM, "tables": "per-feature"}, features=52),
    "dlrm-shared": Case("DLRM, 26 sparse features in one shared table", {**DLRM, "tables": "shared"}),
    "dcn-multihot": Case("DCN-v2, 26 multi-hot features (214 ids a row), a table each",
                         {**DCN, "tables": "per-feature", "preset": "multihot"}),  # and that data's recipe
    "dcn-multihot-13": Case("DCN-v2, 13 multi-hot features, a table each",
                            {**DCN, "tables": "per-feature", "preset": "multihot"}, features=13),
    "dlrm-host-13": Case(f"DLRM, 13 sparse features, a table each on the host store behind a device cache of "
                         f"{CACHE_ROWS} rows", {**DLRM, "tables": "per-feature", "store": "host",
                                                "cache_rows": CACHE_ROWS}, features=13),
    "dlrm-host": Case(f"DLRM, 26 sparse features, a table each on the host store behind a device cache of "
                      f"{CACHE_ROWS} rows", {**DLRM, "tables": "per-feature", "store": "host",
                                             "cache_rows": CACHE_ROWS}),
}


def run_case(case, args):
    """The mean counts per step of ``args.steps`` steps of ``case`` after ``args.warmup`` (a launches report)."""
    from gpuemb.autograd import launches
    return launches.per_step(launches.added(*step_counts(case, args)), args.steps)


def open_run(case, batch, steps, rows=None):
    """A ``Run`` of ``case`` at ``batch`` samples a step, sized for ``steps`` steps, on ``rows`` rows of synthetic data
    (default: a batch more than the steps take, so every step brings new keys)."""
    from gpuemb.train import TrainConfig
    from gpuemb.train.data import synthetic_config, synthetic_data
    from gpuemb.train.run import Run

    config = TrainConfig.from_dict({"embedding_dim": DIM, "batch_size": batch, "steps": steps + 1,
                                    "progress": False, "seed": 0, **case.settings})
    shape = synthetic_config(config)
    if case.features:  # the preset's tables repeated, or cut, to that many
        def cut(values):
            return (values * (case.features // len(values) + 1))[:case.features] if values else values
        shape = replace(shape, cardinalities=cut(shape.cardinalities), hotness=cut(shape.hotness))
    return Run(config, synthetic_data(shape, rows or batch * (steps + 2), 64, case.about))


def step_counts(case, args):
    """The counts of each of ``args.steps`` steps of ``case`` after ``args.warmup``, a launches report each."""
    from gpuemb.autograd import launches
    from gpuemb.train.loop import Pipeline

    run = open_run(case, args.batch, args.warmup + args.steps, getattr(args, "rows", None))
    try:
        # each prefetch in the step, where the worker would start it: the same prefetches, counted the same way
        # however a worker's thread and the step's would have interleaved
        ahead = run.strategy.build_ahead(run.model, worker_thread=False)
        with Pipeline(run.trainer, run.batches, ahead) as pipeline:
            for _ in range(args.warmup):
                pipeline.step()
            counted = []
            for _ in range(args.steps):
                before = launches.COUNTS.snapshot()
                pipeline.step()
                counted.append(launches.COUNTS.since(before))
            return counted
    finally:
        run.close()


def table(name, result, args):
    """The lines that print one case's result: a row per phase with a count, then the step's total."""
    from gpuemb.autograd.launches import PHASES

    def row(label, c):
        c = {**c, "launches": c["numba"] + c["cupy"] + c["cublaslt"]}
        return f"  {label:<22}" + "".join(f"{c[k]:>11g}" for k in COLUMNS)
    counts = result["per_step"]
    return [f"{name}: {result['about']}; batch {args.batch}, mean of {args.steps} step(s) after {args.warmup} "
            f"({result['seconds']:.0f} s)",
            f"  {'phase':<22}" + "".join(f"{k:>11}" for k in COLUMNS),
            *(row(p, counts["by_phase"][p]) for p in PHASES if p in counts["by_phase"]),
            row("step", counts)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter,
                                 epilog="cases:\n" + "\n".join(f"  {k}: {c.about}" for k, c in CASES.items()))
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), metavar="NAME",
                    help="the cases to count (default: all, below)")
    ap.add_argument("--steps", type=int, default=1, help="steps counted, after the warm-up (default 1)")
    ap.add_argument("--warmup", type=int, default=2, help="steps before counting (default 2)")
    ap.add_argument("--batch", type=int, default=16, help="the batch size (default 16)")
    ap.add_argument("--rows", type=int, help="rows of training data, read over again once done (default: a batch "
                    "more than the steps take, so every step brings new keys); --rows of the warm-up's batches "
                    "counts steps whose keys are all known, where no table grows")
    ap.add_argument("--json", metavar="FILE", help="also write the counts, phase by phase, as JSON")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or (args.rows is not None and args.rows < args.batch):
        ap.error("--steps and --batch must be >= 1, --warmup >= 0, --rows at least a batch")
    backend = sys.modules.get("gpuemb.autograd.backend")
    if backend is not None and backend.DEVICE != "emulated":
        print(f"count_step.py: gpuemb was imported on {backend.DEVICE}; the counts need the emulated device: run "
              "this tool in its own process", file=sys.stderr)
        return 2
    os.environ["GPUEMB_DEVICE"], os.environ["NUMBA_ENABLE_CUDASIM"] = "emulated", "1"
    # the simulator runs the kernels' key hashes on NumPy scalars, whose wrapping multiply (meant: uint64) NumPy warns
    # of; a run whose values overflowed still stops at its loss's check
    warnings.filterwarnings("ignore", "overflow encountered in scalar", RuntimeWarning)
    try:
        import gpuemb.autograd.backend  # noqa: F401  picks the emulated device
    except Exception as e:  # DeviceUnavailableError: numba was imported without the simulator
        print(f"count_step.py: {e}", file=sys.stderr)
        return 2
    results = {}
    for name in args.cases:
        start = time.perf_counter()
        counts = run_case(CASES[name], args)
        results[name] = {"about": CASES[name].about, "per_step": counts, "seconds": time.perf_counter() - start}
        print("\n".join(table(name, results[name], args)), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "warmup": args.warmup, "steps": args.steps, "cases": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
