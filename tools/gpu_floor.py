"""The floor of a training step of a ``tools/bench_train.py`` config: the least time its bytes and FLOPs can take.

    python tools/gpu_floor.py [--config mlperf] [--batch-size 65536] [--cap ROWS] [--measured FILE] [--json FILE]

floor = max(row bytes / bandwidth, MLP FLOPs / matmul rate), with the bandwidth (a large copy) and the float32
matmul rate measured now on this device (``bench_ops.ceilings``: CuPy on a GPU, NumPy on the CPU).

- row bytes: each unique row of the batch (counted on one batch of the config's synthetic data) is read once by
  the lookup and read and written once, whole, by the update: ``U · (4D + 2 · row)``, with a row of D weights and
  the optimizer's state (Adagrad: D more floats; SGD: none).
- MLP FLOPs: ``6 · B · Σ in·out`` over the bottom and top layers (forward, and the input and weight gradients),
  plus the dot interaction's ``6 · B · F² · D`` (its Gram matrix forward and backward).
``--measured FILE``: a ``bench_train.py --json`` result; its device-store step time of the same config and batch
is printed beside the floor. ``--cap``: rows per table at most, as bench_train.py's ``--cap``; give both the same,
since the cap changes how many of a batch's ids are unique.
"""
import argparse
import json
import os
import sys
from dataclasses import replace

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import numpy as np

from bench_ops import ceilings
from bench_train import CONFIGS, dataset
from gemm_floor import mlp_layers
from gpuemb.autograd import backend

STATE_FLOATS = {"sgd": 0, "adagrad": 1}  # optimizer floats per weight, beside it in the row


def unique_rows(bc, batch_size):
    """Unique (table, id) pairs in one batch of the config's synthetic data."""
    sparse = dataset(bc, batch_size, 1).train.rows.sparse
    return int(sum(np.unique(sparse[:, t]).size for t in range(sparse.shape[1])))


def mlp_flops(bc, batch_size, n_tables=26):
    """FLOPs of the MLPs and the interaction in a forward and backward of ``batch_size`` samples."""
    F = n_tables + 1
    macs = sum(a * b for sizes in mlp_layers(bc) for a, b in zip(sizes[:-1], sizes[1:]))
    return 6 * batch_size * (macs + F * F * bc.dim)


def floor(bc, batch_size, unique, bandwidth, flop_rate, optimizer="adagrad"):
    """The floor's parts: bytes, FLOPs, their times in ms, and the floor (the larger of the two) in ms."""
    row = 4 * bc.dim * (1 + STATE_FLOATS[optimizer])
    nbytes = unique * (4 * bc.dim + 2 * row)
    flops = mlp_flops(bc, batch_size)
    memory_ms, compute_ms = 1e3 * nbytes / bandwidth, 1e3 * flops / flop_rate
    return {"unique_rows": unique, "row_bytes": nbytes, "flops": flops, "memory_ms": memory_ms,
            "compute_ms": compute_ms, "floor_ms": max(memory_ms, compute_ms),
            "bound": "memory" if memory_ms >= compute_ms else "compute"}


def measured_step_ms(path, config, batch_size, cap=None):
    """The device store's step time (pipeline on where both ran) of ``config`` in a bench_train JSON, or None where
    it ran another batch size or another cap than ``cap`` (the config's own where the JSON names none)."""
    with open(path) as f:
        results = json.load(f)
    settings = results["settings"]
    if settings["batch_size"] != batch_size or (settings.get("cap") or CONFIGS[config].cap) != cap:
        return None
    for result in results["results"]:
        rows = [r for r in result["rows"] if r["store"] == "device"] if result["config"] == config else []
        if rows:
            return sorted(rows, key=lambda r: r["pipeline"] != "on")[0]["step_ms"]
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="mlperf",
                    help="the tables and layers whose floor to compute (default: %(default)s)")
    ap.add_argument("--batch-size", type=int, default=65536, help="samples per step (default: %(default)s)")
    ap.add_argument("--optimizer", choices=sorted(STATE_FLOATS), default="adagrad",
                    help="the rows' update rule, whose state the step reads and writes (default: %(default)s)")
    ap.add_argument("--cap", type=int, help="rows per table at most (default: the config's; give bench_train's)")
    ap.add_argument("--quick", action="store_true", help="smaller ceiling measurements (a smoke run)")
    ap.add_argument("--measured", metavar="FILE", help="a bench_train.py --json result to compare with")
    ap.add_argument("--json", metavar="FILE", help="also write the floor and the ceilings as JSON")
    args = ap.parse_args(argv)
    if args.cap is not None and args.cap < 1:
        ap.error(f"--cap {args.cap}: a table needs at least one row")
    bc = CONFIGS[args.config] if args.cap is None else replace(CONFIGS[args.config], cap=args.cap)
    bandwidth, flop_rate = ceilings(backend.xp, args.quick)
    out = {"config": args.config, "batch_size": args.batch_size, "cap": bc.cap,
           "device": backend.device_info()["device"],
           "bandwidth_GB/s": bandwidth / 1e9, "matmul_GFLOP/s": flop_rate / 1e9,
           **floor(bc, args.batch_size, unique_rows(bc, args.batch_size), bandwidth, flop_rate, args.optimizer)}
    print(f"{args.config} (tables capped at {bc.cap:,} rows) at batch {args.batch_size} on {out['device']}: "
          f"copy {bandwidth / 1e9:.1f} GB/s, float32 "
          f"matmul {flop_rate / 1e12:.2f} TFLOP/s")
    print(f"  rows: {out['unique_rows']:,} unique, {out['row_bytes'] / 1e6:.1f} MB read and written: "
          f"{out['memory_ms']:.2f} ms")
    print(f"  MLPs and interaction: {out['flops'] / 1e9:.1f} GFLOP: {out['compute_ms']:.2f} ms")
    line = f"  floor: {out['floor_ms']:.2f} ms a step ({out['bound']}-bound)"
    if args.measured and not os.path.isfile(args.measured):
        print(f"  (no step time to compare: {args.measured} does not exist; bench_train.py --json writes it)")
    elif args.measured:
        out["measured_step_ms"] = measured_step_ms(args.measured, args.config, args.batch_size, bc.cap)
        if out["measured_step_ms"] is not None:
            line += (f"; measured {out['measured_step_ms']:.2f} ms, "
                     f"{out['floor_ms'] / out['measured_step_ms']:.0%} of the floor's speed")
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
