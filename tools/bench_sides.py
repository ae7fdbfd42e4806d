"""gpuemb against TorchRec and plain torch, each side in a process of its own, interleaved: the end-to-end ratios
of issue 27, measured fairly.

    python tools/bench_sides.py [--config kaggle mlperf mlperf-dcnv2] [--tables shared per-feature]
                                [--peers torchrec torch] [--repeats 3] [--variant NAME:VAR=VALUE[,VAR=VALUE]]
                                [--optimizer RULE] [--batch-size N] [--steps N] [--warmup N] [--cap N]
                                [--no-warm] [--timeout S] [--json FILE]

For each config it writes the batches once (``bench_train.py --dump-batches``), runs each side once uncounted
(``--no-warm`` skips that), then runs ``--repeats`` rounds.
A round runs every side once, each in a fresh process, in an order that turns by one place each round so that no
side always follows the same neighbour:
- gpuemb, once per ``--tables`` setting: ``bench_train.py --stores device --pipeline on``, with no peer in the
  process, so torch is never imported there;
- each ``--peers`` side: ``bench_peer.py``, which never imports gpuemb or numba.

Every side trains the same batches in the same order. A ratio is gpuemb's rate over the peer's *of the same
round*, so a drift of the machine's speed between rounds moves both; the table gives each ratio's median over
the rounds and its range. ``--variant NAME:VAR=VALUE,...`` adds gpuemb sides that run with those environment
variables set (for example ``omp-passive:OMP_WAIT_POLICY=passive``, or ``workqueue:NUMBA_THREADING_LAYER=workqueue``),
to measure a setting against the default in the same rounds. The figures hold only on a quiet machine; the load
average is recorded before each run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _entry
    _entry.guard()

TOOLS = Path(__file__).resolve().parent
CONFIGS = ("kaggle", "mlperf", "mlperf-dcnv2")  # bench_train.py's ALL_CONFIGS, named without importing gpuemb here
TABLES = ("shared", "per-feature")  # gpuemb.train.sections.TABLES, likewise
PEERS = ("torchrec", "torch")  # bench_peer.SIDES
SHAPE_FLAGS = ("batch_size", "steps", "warmup", "cap", "optimizer")


@dataclass
class Side:
    """One column of the table: how to start its process, and the rates of its rounds."""
    name: str
    command: list
    env: dict = field(default_factory=dict)
    peer: str = None  # "torchrec" or "torch", or None for a gpuemb side
    rates: list = field(default_factory=list)  # samples/s of each round, None where the run failed
    runs: list = field(default_factory=list)


def shape_flags(args):
    return [x for k in SHAPE_FLAGS if getattr(args, k) is not None for x in (f"--{k.replace('_', '-')}",
                                                                               str(getattr(args, k)))]


def parse_variant(text):
    """``NAME:VAR=VALUE,...`` -> (NAME, {VAR: VALUE}); anything else is refused in one line."""
    name, sep, pairs = text.partition(":")
    env = dict(p.split("=", 1) for p in pairs.split(",") if "=" in p) if sep else {}
    if not name or not env or len(env) != len([p for p in pairs.split(",") if p]):
        raise argparse.ArgumentTypeError(f"{text!r}: a variant is NAME:VAR=VALUE[,VAR=VALUE], for example "
                                         "omp-passive:OMP_WAIT_POLICY=passive")
    return name, env


def sides_of(config, args, batches):
    sides = []
    for name, env in [("", {})] + list(args.variant):
        for tables in args.tables:
            label = f"gpuemb {tables}" + (f" [{name}]" if name else "")
            sides.append(Side(label, [str(TOOLS / "bench_train.py"), "--config", config, "--tables", tables,
                                      "--stores", "device", "--pipeline", "on", "--no-torch", "--no-torchrec",
                                      *shape_flags(args)], env))
    for peer in args.peers:
        if peer == "torch" and args.optimizer == "rowwise_adagrad":
            print("  plain torch has no row-wise Adagrad for its rows: no plain torch side", flush=True)
            continue
        sides.append(Side(peer, [str(TOOLS / "bench_peer.py"), str(batches), "--side", peer], peer=peer))
    return sides


def run_side(side, json_path, timeout):
    """Run ``side`` once; (samples/s or None, what it recorded or its last error line)."""
    env = {**os.environ, "GPUEMB_DEVICE": "cpu", **side.env}
    load = os.getloadavg()[0]
    try:
        done = subprocess.run([sys.executable, *side.command, "--json", str(json_path)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, {"error": f"ran past --timeout {timeout} s", "load_before": load}
    if done.returncode != 0 or not json_path.exists():
        lines = (done.stderr or done.stdout).strip().splitlines()
        return None, {"error": lines[-1] if lines else f"exit {done.returncode}", "load_before": load}
    got = json.loads(json_path.read_text())
    json_path.unlink()
    if side.peer:
        return got["samples_per_s"], {**got, "load_before": load}
    result = got["results"][0]
    row = result["rows"][0]
    return row["samples_per_s"], {"samples_per_s": row["samples_per_s"], "step_ms": row["step_ms"], "loss": row["loss"],
                                  "gemm_floor_ms": result.get("gemm_floor_ms"), "load_before": load}


def ratios(side, peer):
    """gpuemb's rate over the peer's, round by round, where both ran."""
    return [a / b for a, b in zip(side.rates, peer.rates) if a and b]


def spread(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def bench(config, args, tmp):
    batches = tmp / f"{config}.npz"
    dump = subprocess.run([sys.executable, str(TOOLS / "bench_train.py"), "--config", config, *shape_flags(args),
                           "--dump-batches", str(batches)], env={**os.environ, "GPUEMB_DEVICE": "cpu"},
                          capture_output=True, text=True, timeout=args.timeout)
    if dump.returncode != 0:
        raise SystemExit(f"bench_sides.py: {config}: writing the batches failed: "
                         f"{(dump.stderr or dump.stdout).strip().splitlines()[-1:]}")
    print(f"\n{dump.stdout.strip()}", flush=True)
    sides = sides_of(config, args, batches)
    for side in sides if args.warm else ():  # numba's disk cache, the page cache: paid here, untimed
        rate, run = run_side(side, tmp / "side.json", args.timeout)
        print(f"  warm-up: {side.name:<33} " + (f"{rate:,.0f} samples/s, not counted" if rate else
                                                 f"failed: {run['error']}"), flush=True)
    for r in range(args.repeats):
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:
            rate, run = run_side(side, tmp / "side.json", args.timeout)
            side.rates.append(rate)
            side.runs.append({"round": r, **run})
            what = f"{rate:,.0f} samples/s" if rate else f"failed: {run['error']}"
            print(f"  round {r + 1}: {side.name:<34} {what}", flush=True)
    peers = {s.peer: s for s in sides if s.peer}
    print(f"  {'side':<34}{'samples/s, median (range)':>30}{'GEMM floor ms':>15}"
          + "".join(f"{'vs ' + p:>24}" for p in peers), flush=True)
    for side in sides:
        ok = [x for x in side.rates if x]
        rate = f"{statistics.median(ok):,.0f} ({min(ok):,.0f}-{max(ok):,.0f})" if ok else "failed"
        floors = [r["gemm_floor_ms"] for r in side.runs if r.get("gemm_floor_ms")]
        floor = f"{statistics.median(floors):.1f}" if floors else "-"
        cols = "".join(f"{spread(ratios(side, p)) if not side.peer else '':>24}" for p in peers.values())
        print(f"  {side.name:<34}{rate:>30}{floor:>15}{cols}", flush=True)
    return {"config": config, "sides": [{"name": s.name, "env": s.env, "peer": s.peer, "rates": s.rates,
                                         "runs": s.runs, **{f"vs_{p}": ratios(s, ps) for p, ps in peers.items()
                                                            if not s.peer}} for s in sides]}


def machine():
    """The CPU's model and core count, for the record."""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown"
    return {"cpu": model, "cores": os.cpu_count()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", nargs="+", choices=CONFIGS, default=["kaggle"], help="default: kaggle")
    ap.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES),
                    help="gpuemb's tables, a side each (default both)")
    ap.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS), help="default: torchrec torch")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="count the first run of each side too (by default each runs once, uncounted, first: the "
                    "first process of a fresh checkout compiles numba's kernels into its disk cache)")
    ap.add_argument("--variant", type=parse_variant, action="append", default=[],
                    help="NAME:VAR=VALUE[,VAR=VALUE]: more gpuemb sides, with these environment variables")
    ap.add_argument("--optimizer", choices=("sgd", "adagrad", "rowwise_adagrad"), default="adagrad",
                    help="the rows' rule on every side (default adagrad)")
    ap.add_argument("--batch-size", type=int, help="default: the config's")
    ap.add_argument("--steps", type=int, help="timed steps (default: the config's)")
    ap.add_argument("--warmup", type=int, help="steps before timing (default: the config's)")
    ap.add_argument("--cap", type=int, help="rows per table at most (default: the config's)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    ap.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    print(f"machine: {machine()['cpu']}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_sides_") as tmp:
        results = [bench(c, args, Path(tmp)) for c in args.config]
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "settings": settings, "results": results}, f, indent=1)
    failed = sum(r is None for res in results for s in res["sides"] for r in s["rates"])
    if failed:
        print(f"{failed} run(s) failed; their errors are above", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    _entry.run(main)
