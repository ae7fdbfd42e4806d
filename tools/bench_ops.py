"""Time every fused op on the chosen device, beside the ceilings measured in the same run and a torch peer.

    python tools/bench_ops.py [--quick] [--filter SUBSTR] [--json FILE]

The cases come from every ``tools/bench_*_cases.py`` module: each has ``cases(xp, quick)`` returning
``benchlib.Case`` rows. A case runs a few times to warm up (numba compiles, caches fill), then its median over
repeats is reported, with a device synchronize around each timed call so GPU work is counted. Each row gives
the achieved GB/s or GFLOP/s as a share of a ceiling measured here: a large array copy for bandwidth, a large
float32 matmul for FLOPs. Where torch imports, its time on the same shapes and torch_time / ours (above 1: we
are faster). Absolute times only hold on a quiet machine; compare the ratios.
"""
import argparse
import glob
import importlib
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from gpuemb.autograd import backend

HERE = os.path.dirname(os.path.abspath(__file__))


def _torch_sync():
    """What makes torch's timings count its GPU work: torch.cuda.synchronize where torch uses a GPU."""
    try:
        import torch
    except ImportError:
        return lambda: None
    return torch.cuda.synchronize if backend.gpu_available() and torch.cuda.is_available() else (lambda: None)


def median_seconds(fn, sync=backend.synchronize, warmup=2, budget=0.4, min_repeats=5, max_repeats=50):
    """The median time of ``fn()`` after ``warmup`` calls, repeating until about ``budget`` seconds are spent."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    while len(times) < min_repeats or (len(times) < max_repeats and sum(times) < budget):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ceilings(xp, quick):
    """(bytes/s of a large copy, FLOP/s of a large float32 matmul), both measured now on ``xp``."""
    n = (1 << 24) if quick else (1 << 26)  # 64 or 256 MiB of float32: well past any cache
    src = xp.ones(n, dtype=xp.float32)
    dst = xp.empty_like(src)
    copy = median_seconds(lambda: xp.copyto(dst, src), min_repeats=3, max_repeats=10)
    m = 1024 if quick else (2048 if xp.__name__ == "numpy" else 8192)
    a = xp.ones((m, m), dtype=xp.float32)
    mm = median_seconds(lambda: a @ a, min_repeats=3, max_repeats=10)
    return 2 * n * 4 / copy, 2 * m ** 3 / mm


def load_cases(xp, quick, pattern):
    """Every case of every ``bench_*_cases.py`` next to this file whose op or shape contains ``pattern``."""
    found = []
    for path in sorted(glob.glob(os.path.join(HERE, "bench_*_cases.py"))):
        module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
        found += [c for c in module.cases(xp, quick) if pattern in c.op or pattern in c.shape]
    return found


def measure(case, bandwidth, flop_rate, torch_sync):
    """One result row for a case."""
    seconds = median_seconds(case.run)
    row = {"op": case.op, "shape": case.shape, "ms": seconds * 1e3, "bytes": case.bytes, "flops": case.flops}
    if case.bytes:
        row["GB/s"] = case.bytes / seconds / 1e9
        row["%bw"] = 100 * case.bytes / seconds / bandwidth
    if case.flops:
        row["GFLOP/s"] = case.flops / seconds / 1e9
        row["%flops"] = 100 * case.flops / seconds / flop_rate
    if case.torch_run is not None:
        row["torch_ms"] = median_seconds(case.torch_run, sync=torch_sync) * 1e3
        row["torch/ours"] = row["torch_ms"] / row["ms"]
    return row


def _fmt(value, spec):
    return format("-", ">" + spec.split(".")[0]) if value is None else format(value, spec)


HEADER = (f"{'op':<28} {'shape':<30} {'backend':<7} {'ms':>9} {'GB/s':>7} {'%bw':>5} {'GFLOP/s':>8} {'%flops':>6} "
          f"{'torch ms':>9} {'torch/ours':>10}")


def format_row(r, backend_name):
    """One printed line of the table under HEADER."""
    return (f"{r['op']:<28} {r['shape']:<30} {backend_name:<7} {r['ms']:>9.3f} {_fmt(r.get('GB/s'), '7.1f')} "
            f"{_fmt(r.get('%bw'), '5.0f')} {_fmt(r.get('GFLOP/s'), '8.1f')} {_fmt(r.get('%flops'), '6.0f')} "
            f"{_fmt(r.get('torch_ms'), '9.3f')} {_fmt(r.get('torch/ours'), '10.2f')}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    parser.add_argument("--filter", default="", metavar="SUBSTR", help="only cases whose op or shape contains it")
    parser.add_argument("--json", metavar="FILE", help="also write the rows, ceilings and device as JSON")
    args = parser.parse_args(argv)

    xp = backend.xp
    cases = load_cases(xp, args.quick, args.filter)
    if not cases:
        parser.error(f"no case matches --filter {args.filter!r}")
    bandwidth, flop_rate = ceilings(xp, args.quick)
    info = backend.device_info()
    print(f"device: {info['device']} ({info.get('gpu', 'numpy')}); ceilings: copy {bandwidth / 1e9:.1f} GB/s, "
          f"float32 matmul {flop_rate / 1e9:.1f} GFLOP/s")
    torch_sync = _torch_sync()
    print(HEADER)
    rows = []
    for case in cases:
        rows.append(measure(case, bandwidth, flop_rate, torch_sync))
        print(format_row(rows[-1], xp.__name__), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "backend": xp.__name__, "copy_GB/s": bandwidth / 1e9,
                       "matmul_GFLOP/s": flop_rate / 1e9, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
