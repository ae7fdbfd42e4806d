"""What one call costs the host on the device, the unknowns of the host-overhead estimate (docs/perf/README.md).

    GPUEMB_DEVICE=cuda python3 tools/gpu_host_cost.py [--calls 300] [--repeats 5] [--json FILE]

Each row calls one thing ``--calls`` times on tiny arrays, so that the device finishes each call long before the
host issues the next, and reports the host's microseconds per call (median of ``--repeats``), then waits for the
device once. The rows:
- ``numba launch``: a numba.cuda kernel (``gather_rows``) on CuPy arrays, as the project launches every kernel;
- ``numba launch, no CAI sync``: the same with numba-cuda's ``CUDA_ARRAY_INTERFACE_SYNC`` off. With it on (numba's
  default), numba synchronizes the stream each CuPy argument names before every launch;
- ``cupy elementwise``: ``xp.add(x, y, out=z)``;
- ``nvmath execute``: a planned cuBLASLt matmul run again (``kernels/mlp.py``'s ``PLANS``);
- ``read back``: one value copied to the host (``backend.item``), a wait for the stream;
- ``synchronize``: a wait for an idle device.
Under ``GPUEMB_DEVICE=emulated`` it runs the same calls (``gpu_report.sh --dry-run``); its figures are the
emulation's, not a GPU's.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from gpuemb.autograd import backend
from gpuemb.kernels.gather import gather_rows_cuda
from gpuemb.kernels.mlp import PLANS

CAI_CONFIGS = ("numba.cuda.core.config", "numba.core.config")  # numba-cuda's own config, and older releases'


def cai_sync(on):
    """Set numba's CUDA_ARRAY_INTERFACE_SYNC in every config module that has it; returns the modules set."""
    import importlib
    done = []
    for name in CAI_CONFIGS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "CUDA_ARRAY_INTERFACE_SYNC"):
            module.CUDA_ARRAY_INTERFACE_SYNC = on
            done.append(name)
    return done


def per_call(fn, calls, repeats):
    """Median host microseconds per call of ``fn`` over ``repeats`` runs of ``calls`` calls, the device waited out
    between runs (not inside them)."""
    fn()
    backend.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        backend.synchronize()
    return statistics.median(times)


def measure(calls, repeats):
    xp = backend.xp
    rng = np.random.default_rng(0)
    table = backend.to_device(rng.standard_normal((1024, 16)).astype(np.float32))
    idx = backend.to_device(rng.integers(0, 1024, 64).astype(np.int64))
    x, y = (backend.to_device(rng.standard_normal(256).astype(np.float32)) for _ in range(2))
    z = xp.empty_like(x)
    a, b = (backend.to_device(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
    rows = {}
    rows["numba launch"] = per_call(lambda: gather_rows_cuda(table, idx), calls, repeats)
    was = cai_sync(False)
    try:
        rows["numba launch, no CAI sync"] = per_call(lambda: gather_rows_cuda(table, idx), calls, repeats)
    finally:
        cai_sync(True)
    rows["cupy elementwise"] = per_call(lambda: xp.add(x, y, out=z), calls, repeats)
    rows["nvmath execute"] = per_call(lambda: PLANS.run(a, b), calls, repeats)
    rows["read back"] = per_call(lambda: backend.item(z[0]), calls, repeats)
    rows["synchronize"] = per_call(backend.synchronize, calls, repeats)
    check = backend.to_host(gather_rows_cuda(table, idx))
    np.testing.assert_array_equal(check, backend.to_host(table)[backend.to_host(idx)])
    return rows, was


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=300, help="calls per timed run (default 300)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per row; the median is reported (default 5)")
    p.add_argument("--json", metavar="FILE", help="also write the rows and the device as JSON")
    args = p.parse_args(argv)
    if backend.DEVICE == "cpu":
        p.error("the CPU has no launches to time; set GPUEMB_DEVICE=cuda (or emulated, for a dry run)")
    rows, cai = measure(args.calls, args.repeats)
    print(f"device: {backend.device_info()}")
    print(f"CUDA_ARRAY_INTERFACE_SYNC switched in: {', '.join(cai) or 'no numba config module had it'}")
    print(f"{'call':<28}{'host us/call':>14}")
    for name, us in rows.items():
        print(f"{name:<28}{us:>14.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": backend.device_info(), "cai_configs": cai,
                                               "calls": args.calls, "repeats": args.repeats,
                                               "us_per_call": rows}, indent=1))


if __name__ == "__main__":
    main()
