"""Does each ``--precision`` reach the GEMMs it names, at the sizes a step runs? Error against float64 and time.

    GPUEMB_DEVICE=cuda python3 tools/gpu_precision_check.py [--json FILE]

For every precision (fp32, tf32, bf16) and a few shapes (an MLP layer at batch 65536, DCN-v2's cross matmul, the
dot interaction's Gram products at MLPerf's 27 vectors of 128), it prints ``‖out − ref‖ / ‖ref‖`` against the
product in float64 and the median milliseconds of ``--repeats`` runs. fp32 lands near 1e-7, tf32 near 3e-4 and
bf16 near 3e-3 where the tensor cores ran; a reduced precision whose error stays at fp32's computed in fp32, which
cuBLASLt's FAST compute types allow (docs/precision.md). On the first H200 run, the 6×6×16 Gram product of a unit
test did so. Under ``GPUEMB_DEVICE=emulated`` it runs tiny shapes, for ``tools/gpu_report.sh --dry-run``.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _entry
    _entry.guard()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from gpuemb.autograd import backend
from gpuemb.kernels import dot_interaction as di
from gpuemb.kernels.gemm import matmul

PRECISIONS = ("fp32", "tf32", "bf16")


def shapes(tiny):
    """name -> (a shape, b shape, what): operands of ``a @ b``; 3-D ones are batches."""
    if tiny:
        return {"mlp": ((64, 32), (32, 16), "a layer"), "gram": ((8, 5, 16), (8, 16, 5), "Z·Zᵀ")}
    return {"mlp 65536x1024x1024": ((65536, 1024), (1024, 1024), "an MLP layer of MLPerf's top"),
            "cross 65536x512x512": ((65536, 512), (512, 512), "a DCN-v2 cross at width 512"),
            "gram 65536x27x128": ((65536, 27, 128), (65536, 128, 27), "Z·Zᵀ of the dot interaction")}


def timed(fn, repeats):
    backend.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=10, help="timed runs of each (default %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    args = ap.parse_args(argv)
    if backend.DEVICE == "cpu":
        ap.error("needs a device: GPUEMB_DEVICE=cuda on a GPU, or GPUEMB_DEVICE=emulated")
    xp, rng = backend.xp, np.random.default_rng(0)
    rows = []
    for name, (sa, sb, what) in shapes(backend.DEVICE != "cuda").items():
        a = xp.asarray(rng.standard_normal(sa, dtype=np.float32))
        b = a.transpose(0, 2, 1) if name.startswith("gram") else xp.asarray(rng.standard_normal(sb, dtype=np.float32))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        for precision in PRECISIONS:
            out = matmul(a, b, precision)
            err = float(backend.item(xp.sqrt(((out - ref) ** 2).sum() / (ref ** 2).sum())))
            ms = timed(lambda: matmul(a, b, precision), args.repeats)
            flop = 2 * np.prod(out.shape) * sa[-1]
            rows.append({"shape": name, "what": what, "precision": precision, "rel_error": err, "ms": ms,
                         "tflops": flop / ms / 1e9})
            print(f"{name:<22} {precision:<5} error {err:9.2e}  {ms:8.3f} ms  {flop / ms / 1e9:7.1f} TFLOP/s",
                  flush=True)
        del a, b, ref
    # the interaction op itself, forward and backward, at each precision against its float64 reference
    B, F, D = (8, 5, 16) if backend.DEVICE != "cuda" else (16384, 26, 128)
    bottom, emb = rng.standard_normal((B, D), dtype=np.float32), rng.standard_normal((B, F, D), dtype=np.float32)
    want = di.dot_interaction_ref(bottom.astype(np.float64), emb.astype(np.float64), False, 8)
    for precision in PRECISIONS:
        if precision == "fp32":
            got = backend.to_host(di.dot_interaction(xp.asarray(bottom), xp.asarray(emb), False, 8))
        else:
            got = backend.to_host(di.dot_interaction_gemm(xp.asarray(bottom), xp.asarray(emb), False, 8,
                                                          precision)[0])
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        rows.append({"shape": f"interaction {B}x{F}x{D}", "precision": precision, "rel_error": err})
        print(f"interaction {B}x{F}x{D} {precision:<5} error {err:9.2e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": backend.device_info(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
