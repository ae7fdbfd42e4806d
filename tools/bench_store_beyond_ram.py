"""The beyond-RAM section of ``tools/bench_store.py``: an ssd table whose HDF5 file is larger than the RAM, trained
with a bounded device cache and host cache, against in-memory tables on the same key stream.

1. Check that the disk has room (refuse otherwise): ``--ssd-gb`` GB of 260-byte rows (115M rows at 30 GB).
2. Populate ids ``[0, n)`` in blocks through ``EmbeddingTable.import_rows``: fresh slots in order, so each
   ``SsdTier.write`` covers whole chunks and reads none. The weights are drawn uniform in the initializer's range
   by numpy, which is cheaper than the initializer's Philox draw per element; its rate is measured and printed,
   so what it would add is known.
3. Probe the disk (``tools/disk_probe.py``) on the table's own file, the table still open: random reads of one
   chunk (``chunk_rows`` rows) at queue depth 1 and 16, ``--probe-seconds`` each, through the tier's buffered path.
4. Train ``--steps`` steps of ``--batch`` Zipf(1.05) keys over the ``n`` ids; time the steps after the first 5%.
   With ``--overlap on`` (the default), batch i+1's rows are prefetched on a worker thread during batch i's
   update, as gpuemb's training ``Pipeline`` does (``bench_store_stream.train``). The ssd tier's chunk rate is
   its chunk reads and writes over the seconds the steps waited on them (its ``chunks_read``,
   ``chunks_written`` and ``io_seconds`` counters), set against the probe's IOPS at queue depth 16.
5. The same stream, the same loop, on in-memory tables that hold only the keys it touches, populated the same way
   first: a host home under the same device cache, and a device table.
6. Peak RSS (``ru_maxrss`` and ``VmHWM``) against a bound derived from the table's own structures: the baseline
   RSS before the table, twice the index, allocator and per-slot bookkeeping of every level (growth holds the
   old and the new arrays at once), the cache tiers' rows, the populate block's buffers, the key stream, and a
   fixed 512 MiB for HDF5's metadata cache and the Python heap.

Targets (issue 18), each printed as met or not: the ssd table trains at >= 0.5x the steps/s of the in-memory host
table; its chunk I/O runs at >= 60% of the disk's IOPS at queue depth 16; the peak RSS stays within the bound.
"""
import os
import resource
import shutil
import time

import numpy as np

from bench_store_stream import (gib, hit_rates, keys_of, moved_bytes, pow2_at_least, print_table, rates, train,
                                zipf_ids)
from disk_probe import page_cache_note, print_probes, random_read_iops
from gpuemb.autograd import backend
from gpuemb.optim import RowwiseAdagradRule, init_rows, row_width
from gpuemb.store.init import initial_weights
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

DIM, BLOCK, ALLOWANCE = 64, 1 << 20, 512 << 20
QUEUE_DEPTHS = (1, 16)  # of the disk probe; the chunk rate is set against the last
COUNTERS = ("chunks_read", "chunks_written", "io_seconds")  # the SSD tier's, cumulative
TARGETS = {"ssd_vs_host": 0.5, "chunk_pct_of_qd16": 60.0}


def add_arguments(ap):
    g = ap.add_argument_group("beyond RAM")
    g.add_argument("--beyond-ram", action="store_true", help="run only the beyond-RAM section (needs --ssd-dir)")
    g.add_argument("--ssd-gb", type=float, default=30.0, help="size of the ssd table's rows in GB (default 30)")
    g.add_argument("--steps", type=int, default=3000, help="training steps (default 3000)")
    g.add_argument("--batch", type=int, default=4096, help="keys per step (default 4096)")
    g.add_argument("--cache-rows", type=int, default=1 << 18, help="device cache rows (default 262144)")
    g.add_argument("--host-cache-rows", type=int, default=1 << 22, help="host cache rows (default 4194304)")
    g.add_argument("--chunk-rows", type=int, default=64, help="rows per HDF5 chunk of the ssd home (default 64)")
    g.add_argument("--overlap", choices=("on", "off"), default="on",
                   help="prefetch the next batch on a worker thread during each update (default on)")
    g.add_argument("--probe-seconds", type=float, default=5.0,
                   help="seconds of the disk probe at each queue depth (default 5)")
    g.add_argument("--keep", action="store_true", help="keep the ssd table's file")


def _config(options):
    return TableConfig("beyond_ram", DIM, rule=RowwiseAdagradRule(), lr=0.01, options=options)


def _rss():
    """(ru_maxrss, VmHWM, VmRSS) in bytes."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    kib = {k: int(status[k].split()[0]) * 1024 for k in ("VmHWM", "VmRSS")}
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, kib["VmHWM"], kib["VmRSS"]


def _populate(table, ids, rng):
    """Give ``table`` the rows of ``ids`` through ``import_rows``; (seconds drawing rows, seconds importing)."""
    scale = np.float32(Initializer().scale_for(DIM))
    # Buffers reused for every block (fresh pages are slow to fault in); the rule's initial state is the same for
    # every row (row-wise Adagrad's accumulator), so it is set once.
    w = np.empty((BLOCK, DIM), np.float32)
    rows = np.empty((BLOCK, row_width(table.rule, DIM)), np.float32)
    rows[:, DIM:] = init_rows(table.rule, w[:1])[:, DIM:]
    steps = np.zeros(BLOCK, np.int32)
    draw = store = 0.0
    for start in range(0, ids.size, BLOCK):
        t0 = time.perf_counter()
        block = ids[start:start + BLOCK]
        b = block.size
        rng.random(out=w[:b], dtype=np.float32)
        np.multiply(w[:b], 2 * scale, out=rows[:b, :DIM])
        rows[:b, :DIM] -= scale
        keys = keys_of(block)
        t1 = time.perf_counter()
        table.import_rows(keys, rows[:b], steps[:b])
        store += time.perf_counter() - t1
        draw += t1 - t0
    return draw, store


def _philox_rows_per_s():
    """Rows/s of the table's own initializer at dim 64 (measured on 2**16 keys, after a warm-up)."""
    keys = keys_of(np.arange(1 << 16))
    initial_weights(Initializer(), keys[:16], DIM)
    t = time.perf_counter()
    initial_weights(Initializer(), keys, DIM)
    return keys.size / (time.perf_counter() - t)


def _chunk_io(table):
    """The home tier's cumulative chunk I/O counters (0 for a tier that has none)."""
    return {name: getattr(table.home.tier, name, 0) for name in COUNTERS}


def _train_timed(table, stream, grad, warm, overlap):
    """Train on ``stream``; (seconds of the steps after ``warm``, stats before them, stats after, the home tier's
    chunk I/O during them)."""
    train(table, stream[:warm], grad, overlap)
    before, io = table.stats(), _chunk_io(table)
    seconds = train(table, stream[warm:], grad, overlap)
    return seconds, before, table.stats(), {k: v - io[k] for k, v in _chunk_io(table).items()}


def _probe(table, path, seconds):
    """The disk probe on the table's file at QUEUE_DEPTHS, one chunk a read; printed, and returned by depth."""
    spec = table.home.tier.spec
    block = spec.chunk_rows * spec.row_bytes
    probes = {f"qd{qd}": random_read_iops(path, block, qd, seconds) for qd in QUEUE_DEPTHS}
    print(f"\ndisk probe: random buffered reads of one chunk ({block:,} B) of the table's file, {seconds:g} s a depth")
    print_probes(probes.values())
    note = page_cache_note(path)
    if note:
        print(f"note: {note}")
    return probes, note


def _chunk_rate(io, steps, qd16):
    """The tier's chunk operations a second it waited on, that as % of the qd16 IOPS, and per step."""
    ops = io["chunks_read"] + io["chunks_written"]
    rate = ops / io["io_seconds"] if io["io_seconds"] else None
    return {**io, "chunks/s": rate, "% of qd16": None if rate is None else 100 * rate / qd16["iops"],
            "chunks/step": ops / steps}


def _disk_plan(args, row_bytes):
    """(rows, slab rows) of the ssd table, or exit with what to do when the disk is short."""
    n = int(args.ssd_gb * 1e9 // row_bytes)
    # Few, large slabs: each growth of the home copies its per-slot arrays, and a slab is allocated on disk whole.
    slab = max(args.chunk_rows, min(1 << 23, pow2_at_least(n // 8)))
    need = -(-n // slab) * slab * row_bytes + (1 << 30)
    os.makedirs(args.ssd_dir, exist_ok=True)
    free = shutil.disk_usage(args.ssd_dir).free
    if free < need:
        raise SystemExit(f"beyond RAM: {args.ssd_dir} has {free / 1e9:.1f} GB free, the table needs {need / 1e9:.1f} "
                         f"GB ({n:,} rows of {row_bytes} B in slabs of {slab:,} rows, and 1 GB of room); free some "
                         "space, point --ssd-dir at a bigger disk or lower --ssd-gb")
    print(f"beyond RAM: {n:,} rows of {row_bytes} B ({n * row_bytes / 1e9:.1f} GB) on {args.ssd_dir} ({free / 1e9:.0f} "
          f"GB free); device cache {args.cache_rows:,} rows, host cache {args.host_cache_rows:,}, chunks of "
          f"{args.chunk_rows} rows, slabs of {slab:,}")
    return n, slab


def _row(name, table_stats, before, counted, stream, seconds, row_bytes):
    return {"table": name, "keys": table_stats["keys"], "steps/s": len(stream) / seconds,
            **rates(counted, stream.size, row_bytes, seconds),
            "hit rates": " / ".join(f"{r:.3f}" for r in hit_rates(before, table_stats))}


def beyond_ram(args):
    """Run the section; returns its results as a dict (and prints them)."""
    started = time.perf_counter()
    row_bytes = 4 * row_width(RowwiseAdagradRule(), DIM)
    n, slab = _disk_plan(args, row_bytes)
    ram, base = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), _rss()[2]
    path = os.path.join(args.ssd_dir, "bench_store_beyond_ram.h5")
    philox = _philox_rows_per_s()

    table = EmbeddingTable(_config(StoreOptions("ssd", cache_rows=args.cache_rows, ssd_path=path, slab_rows=slab,
                                                host_cache_rows=args.host_cache_rows, chunk_rows=args.chunk_rows)))
    t = time.perf_counter()
    draw, store = _populate(table, np.arange(n), np.random.default_rng(0))
    populate, size = time.perf_counter() - t, os.path.getsize(path)
    print(f"populated in {populate:.0f} s: {n / populate:,.0f} rows/s, {n * row_bytes / populate / 1e9:.2f} GB/s "
          f"({draw:.0f} s drawing rows, {store:.0f} s in import_rows); file {size / 1e9:.1f} GB = {size / ram:.2f} x "
          f"the RAM ({gib(ram):.1f} GiB); the Philox initializer would draw them at {philox:,.0f} rows/s "
          f"({n / philox:.0f} s)", flush=True)
    probes, note = _probe(table, path, args.probe_seconds)
    overlap = args.overlap == "on"
    ids = zipf_ids(args.steps, args.batch, n, seed=3)
    stream = keys_of(ids).reshape(args.steps, args.batch)
    warm = max(1, args.steps // 20)
    counted = sum(np.unique(keys).size for keys in stream[warm:])
    grad = backend.to_device(np.random.default_rng(1).standard_normal((args.batch, DIM), dtype=np.float32))
    seconds, before, after, io = _train_timed(table, stream, grad, warm, overlap)
    peak = _rss()
    rows = [_row(f"ssd {n * row_bytes / 1e9:.1f} GB, device + host caches", after, before, counted, stream[warm:],
                 seconds, row_bytes)]
    rows[0]["ssd MB/step"] = moved_bytes(before, after, [len(after["levels"]) - 1]) / (args.steps - warm) / 1e6
    chunks = _chunk_rate(io, args.steps - warm, probes[f"qd{QUEUE_DEPTHS[-1]}"])
    overhead = after["overhead_bytes_per_key"] * after["keys"]
    caches = sum(level["bytes"] for level in after["levels"][:-1])
    bound = base + 2 * overhead + caches + 3 * BLOCK * row_bytes + 2 * ids.nbytes + ALLOWANCE
    table.close()
    if not args.keep:
        os.remove(path)

    touched = np.unique(ids)
    for name, options in (("host, same device cache", StoreOptions("host", cache_rows=args.cache_rows)),
                          ("device", StoreOptions())):
        mem = EmbeddingTable(_config(options))
        _populate(mem, touched, np.random.default_rng(0))
        seconds, before, after, _ = _train_timed(mem, stream, grad, warm, overlap)
        rows.append(_row(f"in memory: {name}", after, before, counted, stream[warm:], seconds, row_bytes))
        mem.close()
    for r in rows:
        r["ssd / this"] = rows[0]["rows/s"] / r["rows/s"]
    total = time.perf_counter() - started
    print_table(f"beyond RAM: {args.steps} steps of {args.batch} Zipf keys, {touched.size:,} keys touched, overlap "
                f"{args.overlap}; rates over the last {args.steps - warm} steps", rows,
                [("table", "table", "s"), ("keys", "keys", ",d"), ("steps/s", "steps/s", ",.1f"),
                 ("keys/s", "keys/s", ",.0f"),
                 ("rows/s", "rows/s", ",.0f"), ("GB/s", "GB/s", ".3f"), ("ssd / this", "ssd / this", ".2f"),
                 ("hit rates", "hit rates (top first)", "s"), ("ssd MB/step", "ssd MB/step", ".1f")])
    within = peak[1] <= bound
    print(f"\npeak RSS during the ssd run: ru_maxrss {gib(peak[0]):.2f} GiB, VmHWM {gib(peak[1]):.2f} GiB; bound "
          f"{gib(bound):.2f} GiB = baseline {gib(base):.2f} + 2 x overhead {gib(overhead):.2f} ({overhead / n:.1f} "
          f"B/key) + caches {gib(caches):.2f} + populate block {gib(3 * BLOCK * row_bytes):.2f} + stream "
          f"{gib(2 * ids.nbytes):.2f} + allowance {gib(ALLOWANCE):.2f}: {'within' if within else 'OVER'}. "
          f"Whole section: {total / 60:.1f} min")
    ssd_vs_host = rows[0]["steps/s"] / rows[1]["steps/s"]
    targets = _print_targets(chunks, ssd_vs_host, within)
    return {"rows": n, "row_bytes": row_bytes, "file_bytes": size, "ram_bytes": ram, "steps": args.steps,
            "batch": args.batch, "warm_steps": warm, "cache_rows": args.cache_rows, "slab_rows": slab,
            "host_cache_rows": args.host_cache_rows, "chunk_rows": args.chunk_rows, "touched_keys": int(touched.size),
            "populate_s": populate, "populate_draw_s": draw, "populate_import_s": store, "philox_rows/s": philox,
            "tables": rows, "peak_ru_maxrss": peak[0], "peak_VmHWM": peak[1], "baseline_rss": base,
            "overhead_bytes": overhead, "cache_bytes": caches, "bound_bytes": bound, "within_bound": bool(within),
            "total_s": total, "overlap": overlap, "probe": probes, "probe_note": note, "chunk_io": chunks,
            "ssd_vs_host_steps": ssd_vs_host, "targets": targets}


def _print_targets(chunks, ssd_vs_host, within):
    """Print the chunk rate and each target, met or not; returns {TARGETS key or "rss_within_bound": met} (None:
    not measured)."""
    pct = chunks["% of qd16"]
    if chunks["chunks/s"] is None:
        print("ssd tier's chunk I/O: not measured (its tier has no chunks_read/chunks_written/io_seconds counters, "
              "or it waited on none)")
    else:
        print(f"ssd tier's chunk I/O over the timed steps: {chunks['chunks_read']:,} chunks read + "
              f"{chunks['chunks_written']:,} written in {chunks['io_seconds']:.2f} s waited = "
              f"{chunks['chunks/s']:,.0f} chunks/s, {pct:.0f}% of the qd16 IOPS; {chunks['chunks/step']:.1f} a step")
    targets = [("ssd_vs_host", f"ssd table >= {TARGETS['ssd_vs_host']}x the in-memory host table's steps/s",
                ssd_vs_host >= TARGETS["ssd_vs_host"], f"{ssd_vs_host:.2f}x"),
               ("chunk_pct_of_qd16", f"chunk I/O >= {TARGETS['chunk_pct_of_qd16']:.0f}% of the qd16 IOPS",
                None if pct is None else pct >= TARGETS["chunk_pct_of_qd16"], "-" if pct is None else f"{pct:.0f}%"),
               ("rss_within_bound", "peak RSS within the bound", within, "within" if within else "over")]
    print("targets:")
    for _, label, met, got in targets:
        print(f"  {label}: {got}, {'not measured' if met is None else 'met' if met else 'NOT met'}")
    return {key: None if met is None else bool(met) for key, _, met, _ in targets}
