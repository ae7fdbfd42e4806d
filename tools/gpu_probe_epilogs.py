"""Which bias-gradient epilogs cuBLASLt plans on this GPU, for the layouts a weight gradient can be asked in.

    GPUEMB_DEVICE=cuda python3 tools/gpu_probe_epilogs.py [--json FILE]

The fused MLP's weight gradient ``gW = g.T @ x`` with its bias gradient ``gb = g.sum(0)`` can be one cuBLASLt call
in several ways: BGRADB on ``gWᵀ = xᵀ @ g`` (what kernels/mlp.py asks first), or BGRADA on ``gW = gᵀ @ x``,
with the operands row- or column-major. cuBLASLt documents no table of which it supports; it says so when planning
(CUBLAS_STATUS_NOT_SUPPORTED), and mlp.py then falls back to a plain matmul and a reduction. Each row here plans
and runs one variant on random data and checks D and the bias gradient against NumPy in float64.
"""
import argparse
import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from gpuemb.autograd import backend


def variants(xp, x, g):
    """(name, epilog, a, b, the bias gradient's key, D's expected transpose)"""
    return [
        ("BGRADB xT(col) @ g(row)", "BGRADB", x.T, g, "bgradb", True),
        ("BGRADB xT(row) @ g(row)", "BGRADB", xp.ascontiguousarray(x.T), g, "bgradb", True),
        ("BGRADB xT(col) @ g(col)", "BGRADB", x.T, xp.asfortranarray(g), "bgradb", True),
        ("BGRADA gT(col) @ x(row)", "BGRADA", g.T, x, "bgrada", False),
        ("BGRADA gT(row) @ x(row)", "BGRADA", xp.ascontiguousarray(g.T), x, "bgrada", False),
        ("BGRADA gT(row) @ x(col)", "BGRADA", xp.ascontiguousarray(g.T), xp.asfortranarray(x), "bgrada", False),
    ]


def probe(batch, n_in, n_out, dtype, compute):
    nvmath, xp = backend.library("nvmath.linalg.advanced"), backend.xp
    rng = np.random.default_rng(batch)
    xh, gh = (rng.standard_normal(s).astype(dtype) for s in ((batch, n_in), (batch, n_out)))
    gW, gb = gh.astype(np.float64).T @ xh.astype(np.float64), gh.astype(np.float64).sum(0)
    rows = []
    for name, epilog, a, b, out, transposed in variants(xp, backend.to_device(xh), backend.to_device(gh)):
        options = nvmath.MatmulOptions(
            compute_type=None if compute is None else getattr(nvmath.MatmulComputeType, compute))
        try:
            d, aux = nvmath.matmul(a, b, epilog=getattr(nvmath.MatmulEpilog, epilog), options=options)
        except Exception as e:
            rows.append({"variant": name, "ok": False, "error": f"{type(e).__name__}: {str(e)[:160]}"})
            continue
        d = backend.to_host(d).astype(np.float64)
        d = d.T if transposed else d
        got_b = backend.to_host(aux[out]).astype(np.float64)
        rel = max(np.linalg.norm(d - gW) / np.linalg.norm(gW), np.linalg.norm(got_b - gb) / np.linalg.norm(gb))
        rows.append({"variant": name, "ok": True, "rel_error": float(rel)})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if backend.DEVICE == "cpu":
        ap.error("cuBLASLt needs a device: set GPUEMB_DEVICE=cuda (or emulated)")
    results = []
    # widths whose rows are a multiple of 16 bytes, then two that are not (the models' 13 dense inputs, the tests' 130)
    for batch, n_in, n_out in ((64, 128, 64), (4096, 512, 256), (64, 13, 64), (64, 130, 40)):
        for dtype, compute in ((np.float32, None), (np.float32, "COMPUTE_32F_FAST_16BF"),
                               (np.float32, "COMPUTE_32F_FAST_TF32"), (np.float16, None)):
            for row in probe(batch, n_in, n_out, dtype, compute):
                row.update(shape=f"B={batch} {n_in}->{n_out}", dtype=np.dtype(dtype).name, compute=compute or "default")
                results.append(row)
                result = f"ok, error {row['rel_error']:.1e}" if row["ok"] else f"REFUSED: {row['error']}"
                print(f"{row['shape']:<18}{row['dtype']:<9}{row['compute']:<24}{row['variant']:<26}{result}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": backend.device_info(), "rows": results}, indent=1))


if __name__ == "__main__":
    _entry.run(main)
