"""Time every fused op on the chosen device, beside the ceilings measured in the same run and a torch peer; or,
given a shape, the embedding ops of that shape through gpuemb's store beside FBGEMM's TBE (or torch's bags).

    python tools/bench_ops.py [--quick] [--filter SUBSTR] [--json FILE]
    python tools/bench_ops.py [--shape FILE] [--tables T] [--rows N[,N...]] [--dims D[,D...]] [--batch B]
                              [--bag DIST] [--zipf ALPHA] [--precision P] [--optimizer RULE] [--pooling MODE]
                              [--lr LR] [--seed S] [--quick] [--json FILE]

Kernel cases (no shape given) come from every ``tools/bench_*_cases.py`` module: each has ``cases(xp, quick)``
returning ``benchlib.Case`` rows. A case runs a few times to warm up (numba compiles, caches fill), then its median
over repeats is reported, with a device synchronize around each timed call so GPU work is counted. Each row gives
the achieved GB/s or GFLOP/s as a share of a ceiling measured here (%bw, %flops): a large array copy for
bandwidth, a large float32 matmul for FLOPs. Where torch imports, its time on the same shapes and torch_time / ours
(above 1: we are faster), timed in this process.

A shape (``--shape FILE`` and any of its flags, which win over the file; ``bench_shape.py`` says what each is,
``tools/shapes/`` holds examples) runs the store's forward and backward+update (``bench_shaped_ops.py``, which
states the bytes each must move) and, in a process of its own, the peer's (``bench_ops_peer.py``). Each op's
row: ms a call, the bytes it must move, GB/s and that as % of the copy ceiling, and the peer's beside it.

% of ceiling is the op's GB/s over a copy's, measured at the start in this process on the same device: a copy of
256 MiB (64 with --quick), reads plus writes, well past any cache. An op whose rows repeat or fit in a cache
(Zipf's hot ids, a small table) reads them from L2/L3 (a GPU's L2), faster than memory: it may pass 100%. The
header also gives a 1 MiB copy, which stays in cache, for that scale. Absolute times only hold on a quiet
machine; compare the ratios.
"""
import argparse
import functools
import glob
import importlib
import json
import os
import sys
import tempfile

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import bench_clock
import bench_shape
import bench_shaped_ops
import benchlib
from gpuemb.autograd import backend

HERE = os.path.dirname(os.path.abspath(__file__))


def _torch_sync():
    """What makes torch's timings count its GPU work: torch.cuda.synchronize where torch uses a GPU."""
    try:
        import torch
    except ImportError:
        return lambda: None
    return torch.cuda.synchronize if backend.gpu_available() and torch.cuda.is_available() else (lambda: None)


# The clock of every single-op benchmark, synchronizing the backend's device (copy_rate below, which
# bench_store_stream.py takes too, times with it)
median_seconds = functools.partial(bench_clock.median_seconds, sync=backend.synchronize)
CACHED_COPY = 1 << 20  # bytes of the copy that stays in cache: the scale of a rate above 100% of the ceiling


def copy_rate(xp, nbytes):
    """Bytes/s (read plus written) of a copy of ``nbytes`` of float32 on ``xp``."""
    src = xp.ones(nbytes // 4, dtype=xp.float32)
    dst = xp.empty_like(src)
    return 2 * src.nbytes / median_seconds(lambda: xp.copyto(dst, src), min_repeats=3, max_repeats=200, budget=0.2)


def ceilings(xp, quick):
    """(bytes/s of a large copy, FLOP/s of a large float32 matmul), both measured now on ``xp``."""
    m = 1024 if quick else (2048 if xp.__name__ == "numpy" else 8192)
    a = xp.ones((m, m), dtype=xp.float32)
    mm = median_seconds(lambda: a @ a, min_repeats=3, max_repeats=10)
    return copy_rate(xp, memory_copy_bytes(quick)), 2 * m ** 3 / mm


def memory_copy_bytes(quick):
    return (1 << 26) if quick else (1 << 28)  # 64 or 256 MiB: well past any cache


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


COLUMNS = [benchlib.Column("op", "op"), benchlib.Column("shape", "shape"), benchlib.Column("backend", "backend"),
           benchlib.Column("ms", "ms", ".3f", 9), benchlib.Column("GB/s", "GB/s", ".1f", 7),
           benchlib.Column("%bw", "%bw", ".0f", 5), benchlib.Column("GFLOP/s", "GFLOP/s", ".1f", 8),
           benchlib.Column("%flops", "%flops", ".0f", 6), benchlib.Column("torch ms", "torch_ms", ".3f", 9),
           benchlib.Column("torch/ours", "torch/ours", ".2f", 10)]
FOOTNOTE = ("%bw: GB/s over the copy ceiling above; %flops: GFLOP/s over the matmul ceiling. Over 100%: the op's "
            "bytes came from a cache (L2/L3), faster than the large copy's memory. torch/ours above 1: we are faster.")


def kernel_cases(args, parser):
    """The table of every kernel case (no shape given)."""
    xp = backend.xp
    cases = load_cases(xp, args.quick, args.filter)
    if not cases:
        parser.error(f"no case matches --filter {args.filter!r}")
    bandwidth, flop_rate = ceilings(xp, args.quick)
    info = backend.device_info()
    print(f"device: {info['device']} ({info.get('gpu', 'numpy')}); ceilings: copy {bandwidth / 1e9:.1f} GB/s, "
          f"float32 matmul {flop_rate / 1e9:.1f} GFLOP/s")
    torch_sync = _torch_sync()
    table = benchlib.Table(COLUMNS, [{"op": c.op, "shape": c.shape, "backend": xp.__name__} for c in cases])
    print(table.header())
    rows = []
    for case in cases:
        rows.append(measure(case, bandwidth, flop_rate, torch_sync))
        print(table.line({**rows[-1], "backend": xp.__name__}), flush=True)
    print(FOOTNOTE)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "backend": xp.__name__, "copy_GB/s": bandwidth / 1e9,
                       "matmul_GFLOP/s": flop_rate / 1e9, "rows": rows}, f, indent=1)
    return 0


OPS = {"forward": "forward", "backward": "backward+update"}  # bench_shaped_ops' times, and their names here


SHAPED_COLUMNS = [benchlib.Column(*c) for c in (
    ("op", "op"), ("MB moved", "MB", ".2f"), ("gpuemb ms", "ms", ".3f"), ("GB/s", "GB/s", ".2f"),
    ("% ceiling", "%ceiling", ".0f"), ("peer ms", "peer_ms", ".3f"), ("GB/s", "peer_GB/s", ".2f"),
    ("% ceiling", "peer_%ceiling", ".0f"), ("peer/ours", "peer/ours", ".2f"))]


def shaped_row(op, moved, seconds, peer_seconds, ceiling):
    """One op's row: its bytes, and each side's time, GB/s and % of the copy ceiling; peer/ours above 1: we are
    faster."""
    row = {"op": OPS[op], "bytes": moved, "MB": moved / 1e6}
    for side, s in (("", seconds), ("peer_", peer_seconds)):
        if s is not None:
            row.update({f"{side}ms": s * 1e3, f"{side}GB/s": moved / s / 1e9,
                        f"{side}%ceiling": 100 * moved / s / ceiling})
    row["peer/ours"] = peer_seconds / seconds if peer_seconds is not None else None
    return row


def peer_side(shape, budget):
    """The peer's result (``bench_ops_peer.py``), run in a process of its own on this shape; a failed run is a
    result with no peer and its line as the note."""
    with tempfile.TemporaryDirectory(prefix="bench_ops_") as tmp:
        path = os.path.join(tmp, "shape.json")
        with open(path, "w") as f:
            json.dump(shape.to_dict(), f)
        device = "cuda" if backend.DEVICE == "cuda" else "cpu"
        try:
            return benchlib.run_apart("bench_ops_peer.py", ["--shape", path, "--device", device,
                                                            "--budget", str(budget)])
        except benchlib.PeerError as e:
            return {"peer": None, "note": str(e)}


def shaped(shape, args):
    """The store's embedding ops of ``shape`` beside the peer's: print the table, write --json."""
    xp, info = backend.xp, backend.device_info()
    memory, cached = copy_rate(xp, memory_copy_bytes(args.quick)), copy_rate(xp, CACHED_COPY)
    print(f"device: {info['device']} ({info.get('gpu', 'numpy')}); load average {os.getloadavg()[0]:.2f}")
    print(f"shape: {shape.describe()}")
    print(f"ceiling: copy of {memory_copy_bytes(args.quick) >> 20} MiB {memory / 1e9:.1f} GB/s (memory); "
          f"of {CACHED_COPY >> 20} MiB {cached / 1e9:.1f} GB/s (in cache)", flush=True)
    budget = 0.1 if args.quick else 0.4
    ours = bench_shaped_ops.seconds(shape, budget)
    moved = bench_shaped_ops.moved_bytes(shape, shape.batches(bench_shape.N_BATCHES))
    peer = peer_side(shape, budget)
    rows = [shaped_row(op, moved[op], ours[op], peer.get(f"{op}_s"), memory) for op in OPS]
    note = f" ({peer['note']})" if peer.get("note") else ""
    print(f"peer: {peer['peer'] or 'none'}{note}")
    table = benchlib.Table(SHAPED_COLUMNS, rows)
    print(table.header())
    for row in rows:
        print(table.line(row))
    print("each side in a process of its own. % ceiling: GB/s over the memory copy's; over 100%, rows came from a "
          "cache (repeated ids, small tables), up to the in-cache copy's rate. peer/ours above 1: we are faster.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "backend": xp.__name__, "shape": shape.to_dict(), "copy_GB/s": memory / 1e9,
                       "cached_copy_GB/s": cached / 1e9, "peer": peer["peer"], "peer_note": peer.get("note"),
                       "load_average": os.getloadavg(), "rows": rows}, f, indent=1)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (or a short timing), for a smoke run")
    parser.add_argument("--filter", default="", metavar="SUBSTR", help="only cases whose op or shape contains it")
    parser.add_argument("--json", metavar="FILE", help="also write the rows, ceilings and device as JSON")
    bench_shape.add_flags(parser)
    args = parser.parse_args(argv)
    given = bench_shape.given_flags(args)
    if args.shape is None and not given:
        return kernel_cases(args, parser)
    try:
        if args.filter:
            raise bench_shape.ShapeError("--filter picks kernel cases, a shape runs the store's ops; drop one")
        shape = bench_shape.resolve(given, args.shape)
    except bench_shape.ShapeError as e:
        print(f"bench_ops.py: error: {e}", file=sys.stderr)
        return 2
    return shaped(shape, args)


if __name__ == "__main__":
    _entry.run(main)
