"""What one call costs the host on the device, the unknowns of the host-overhead estimate (docs/perf/README.md).

    GPUEMB_DEVICE=cuda python3 tools/gpu_host_cost.py [--calls 300] [--repeats 5] [--json FILE]

Each row calls one thing ``--calls`` times on tiny arrays, so that the device finishes each call long before the
host issues the next, and reports the host's microseconds per call (median of ``--repeats``), then waits for the
device once. The rows:
- ``numba launch``: a numba.cuda kernel (``gather_rows``) on CuPy arrays, launched by numba's own dispatcher, as the
  project launched every kernel before autograd/module_launch.py (and still does with ``GPUEMB_KERNEL_LAUNCH=numba``);
- ``numba launch, no CAI sync``: the same with numba-cuda's ``CUDA_ARRAY_INTERFACE_SYNC`` off. With it on (numba's
  default), numba synchronizes the stream each CuPy argument names before every launch;
- ``numba launch, numba arrays``: the same kernel on numba views made once (``cuda.as_cuda_array``), on a numba
  stream made once: what is left of a launch without reading CuPy's arrays each time;
- ``numba PTX through CuPy``: the same kernel compiled by numba to PTX (``compile_ptx_for_current_device``), loaded
  as a CuPy ``RawModule`` and launched by CuPy with numba's argument layout (per array: meminfo, parent, item
  count, item size, data, shape, strides): what a launch costs when numba only compiles;
- ``project launch (cupy module)``: ``gather_rows_cuda`` as the project launches it on a GPU now (the default
  ``GPUEMB_KERNEL_LAUNCH=cupy``, autograd/module_launch.py): the same idea as the row above, with the arguments typed
  and flattened on every call; checked against the reference first;
- ``cupy elementwise``: ``xp.add(x, y, out=z)``;
- ``nvmath execute``: a planned cuBLASLt matmul run again (``kernels/mlp.py``'s ``PLANS``);
- ``read back``: one value copied to the host (``backend.item``), a wait for the stream;
- ``synchronize``: a wait for an idle device.
Under ``GPUEMB_DEVICE=emulated`` it runs the same calls (``gpu_report.sh --dry-run``); its figures are the
emulation's, not a GPU's.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from gpuemb.autograd import backend, module_launch
from gpuemb.autograd.launch import blocks_for, stream_for
from gpuemb.kernels.gather import _gather_rows_kernel, gather_rows_cuda
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


def numba_gather(table, idx):
    """``gather_rows_cuda`` launched by numba's dispatcher, whoever launches the project's kernels on a GPU."""
    launch = getattr(_gather_rows_kernel, "dispatcher", _gather_rows_kernel) if backend.real_gpu() \
        else _gather_rows_kernel  # the emulated device's dispatcher takes only its own arrays
    out = backend.xp.empty((idx.shape[0], table.shape[1]), dtype=table.dtype)
    # numba's dispatcher takes numba's stream; stream_for gives CuPy's where CuPy launches the project's kernels
    stream = module_launch.numba_stream(stream_for(table))
    launch[blocks_for(idx.shape[0] * table.shape[1]), 256, stream](table, idx, out)
    return out


def _numba_abi(a):
    """The kernel parameters numba passes for the array ``a``."""
    return [np.uint64(0), np.uint64(0), np.int64(a.size), np.int64(a.itemsize), a,
            *(np.int64(n) for n in a.shape), *(np.int64(n) for n in a.strides)]


def launch_variants(table, idx):
    """The two ways to launch gather_rows that skip parts of numba's launch, each checked against it first; a
    variant that fails is reported by its error, not timed."""
    import re
    import tempfile

    from numba import cuda

    xp = backend.xp
    want = backend.to_host(gather_rows_cuda(table, idx))
    n, variants = idx.shape[0] * table.shape[1], {}
    out = xp.empty((idx.shape[0], table.shape[1]), np.float32)
    try:
        stream = cuda.external_stream(backend.current_stream().ptr)
        views = [cuda.as_cuda_array(a, sync=False) for a in (table, idx, out)]
        launch = getattr(_gather_rows_kernel, "dispatcher", _gather_rows_kernel)[max(1, (n + 255) // 256), 256, stream]
        launch(*views)
        np.testing.assert_array_equal(backend.to_host(out), want)
        variants["numba launch, numba arrays"] = lambda: launch(*views)
    except Exception as e:
        variants["numba launch, numba arrays"] = f"{type(e).__name__}: {str(e)[:200]}"
    try:
        ptx, _ = cuda.compile_ptx_for_current_device(_gather_rows_kernel.py_func,
                                                     "void(float32[:, ::1], int64[::1], float32[:, ::1])")
        entry = re.search(r"\.entry\s+(\S+)\(", ptx).group(1)
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        fn = xp.RawModule(path=f.name).get_function(entry)
        args = tuple(_numba_abi(table) + _numba_abi(idx) + _numba_abi(out))
        out[...] = 0
        fn((max(1, (n + 255) // 256),), (256,), args)
        np.testing.assert_array_equal(backend.to_host(out), want)
        variants["numba PTX through CuPy"] = lambda: fn((max(1, (n + 255) // 256),), (256,), args)
    except Exception as e:
        variants["numba PTX through CuPy"] = f"{type(e).__name__}: {str(e)[:200]}"
    return variants


def project_launch(table, idx, calls, repeats):
    """Host microseconds of ``gather_rows_cuda`` as the project launches it, once it equals the reference; else why
    not, as the row's text."""
    if module_launch.LAUNCHER != "cupy":
        return f"{module_launch.SETTING}={module_launch.LAUNCHER}: numba launches the project's kernels"
    try:
        for _ in range(2):  # the first launch of a signature is numba's, which compiles it; the second CuPy's
            got = backend.to_host(gather_rows_cuda(table, idx))
        np.testing.assert_array_equal(got, backend.to_host(table)[backend.to_host(idx)])
        if not all(_gather_rows_kernel.functions.values()):
            return "numba still launches gather_rows: CuPy could not load its code"
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    return per_call(lambda: gather_rows_cuda(table, idx), calls, repeats)


def measure(calls, repeats):
    xp = backend.xp
    rng = np.random.default_rng(0)
    table = backend.to_device(rng.standard_normal((1024, 16)).astype(np.float32))
    idx = backend.to_device(rng.integers(0, 1024, 64).astype(np.int64))
    x, y = (backend.to_device(rng.standard_normal(256).astype(np.float32)) for _ in range(2))
    z = xp.empty_like(x)
    a, b = (backend.to_device(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
    rows = {}
    rows["numba launch"] = per_call(lambda: numba_gather(table, idx), calls, repeats)
    was = cai_sync(False)
    try:
        rows["numba launch, no CAI sync"] = per_call(lambda: numba_gather(table, idx), calls, repeats)
    finally:
        cai_sync(True)
    if backend.real_gpu():
        for name, fn in launch_variants(table, idx).items():
            rows[name] = per_call(fn, calls, repeats) if callable(fn) else fn
        rows["project launch (cupy module)"] = project_launch(table, idx, calls, repeats)
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
    print(f"{'call':<32}{'host us/call':>14}")
    for name, us in rows.items():
        print(f"{name:<32}{us:>14.1f}" if isinstance(us, float) else f"{name:<32}  FAILED: {us}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": backend.device_info(), "cai_configs": cai,
                                               "calls": args.calls, "repeats": args.repeats,
                                               "us_per_call": rows}, indent=1))


if __name__ == "__main__":
    _entry.run(main)
