"""Benchmark of the embedding store (``gpuemb.store``) on a Zipf(1.05) key stream.

    python tools/bench_store.py [--quick] [--json FILE] [--ssd-dir DIR]
    python tools/bench_store.py --beyond-ram --ssd-dir DIR [--ssd-gb 30] [--steps 3000] [--overlap on|off]
                                [--probe-seconds 5] [--keep] [--json FILE]

Every table is dim 64 with row-wise Adagrad, so a row is 64 weights and one accumulator: 260 bytes. Sections:

- configs: lookup plus update (``table.lookup(keys).backward(grad)``, no prefetch) of the same stream on a device
  table, a device cache over a host home, over an ssd home, and over a host cache over an ssd home. rows/s
  counts each batch's unique keys; GB/s counts each of them read and written once, whole (weights and optimizer
  state): the least a lookup plus update must move. The device table's GB/s is also given as a share of a large
  copy measured in the same run (a cupy device-to-device copy on a GPU, a numpy copy on the CPU).
- hit rate vs cache size: a device cache over a host home of 1% to 20% of the keys the stream touches, LRU and
  LFU, over the last three quarters of the stream (lookups under ``no_grad``: updates do not move rows).
- overhead per key: ``stats()`` of device tables of 1e4 to 1e7 keys, against the target of 24 bytes of index
  plus allocator per key beyond the row.
- beyond RAM (``--beyond-ram``, alone): an ssd table larger than the RAM against in-memory ones, the disk's
  random-read IOPS probed on its file, and the targets of issue 18; see ``tools/bench_store_beyond_ram.py``.

Absolute rates hold only on a quiet machine; compare the ratios within one run.
"""
import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import numpy as np

from bench_store_beyond_ram import add_arguments, beyond_ram
from bench_store_stream import (copy_bandwidth, hit_rates, keys_of, moved_bytes, print_table, rates, train,
                                unique_counts, zipf_keys)
from gpuemb.autograd import backend, no_grad
from gpuemb.optim import RowwiseAdagradRule
from gpuemb.store.options import Initializer, StoreOptions, TableConfig
from gpuemb.store.table import EmbeddingTable

DIM = 64
FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.20)


@dataclass(frozen=True)
class Sizes:
    universe: int        # ids the Zipf stream draws from
    batch: int           # keys per step in the configs section
    warm: int            # steps run before timing (numba compiles, caches fill)
    steps: int           # steps timed
    sweep_batch: int     # keys per step in the hit-rate sweep
    sweep_steps: int
    overhead_keys: tuple
    copy_bytes: int


FULL = Sizes(1 << 24, 16384, 40, 120, 4096, 400, (10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7), 1 << 30)
QUICK = Sizes(1 << 20, 4096, 4, 12, 256, 400, (10 ** 3, 10 ** 4, 10 ** 5), 1 << 26)


def table_config(options, dim=DIM, initializer=Initializer()):
    return TableConfig("bench", dim, rule=RowwiseAdagradRule(), lr=0.01, initializer=initializer, options=options)


def configs(s, folder):
    """The configs section: one row per placement, on the same stream."""
    stream = zipf_keys(s.warm + s.steps, s.batch, s.universe)
    unique, touched = unique_counts(stream), np.unique(stream).size
    cache, host_cache = max(touched // 10, 2 * int(unique.max())), touched // 2
    print(f"configs: {s.warm} + {s.steps} timed steps of {s.batch} keys over {s.universe:,} ids, {touched:,} keys "
          f"touched, {unique[s.warm:].mean():,.0f} unique per step; device cache {cache:,} rows, host cache "
          f"{host_cache:,}")
    placements = {
        "device": StoreOptions(),
        "device cache / host": StoreOptions("host", cache_rows=cache),
        "device cache / ssd": StoreOptions("ssd", cache_rows=cache, ssd_path=f"{folder}/a.h5"),
        "device cache / host cache / ssd": StoreOptions("ssd", cache_rows=cache, host_cache_rows=host_cache,
                                                        ssd_path=f"{folder}/b.h5")}
    grad = backend.to_device(np.random.default_rng(0).standard_normal((s.batch, DIM), dtype=np.float32))
    rows = []
    for name, options in placements.items():
        table = EmbeddingTable(table_config(options))
        train(table, stream[:s.warm], grad)
        before = table.stats()
        seconds = train(table, stream[s.warm:], grad)
        after = table.stats()
        lower = moved_bytes(before, after, range(1, len(after["levels"])))
        rows.append({"config": name, **rates(unique[s.warm:].sum(), stream[s.warm:].size, after["row_bytes"], seconds),
                     "hit rates": " / ".join(f"{r:.2f}" for r in hit_rates(before, after)),
                     "lower tiers MB/step": lower / s.steps / 1e6})
        rows[-1]["vs device"] = rows[-1]["rows/s"] / rows[0]["rows/s"]
        table.close()
    return rows


def hit_rate_sweep(s):
    """The hit rate of a device cache over a host home against its size, LRU and LFU."""
    stream = zipf_keys(s.sweep_steps, s.sweep_batch, s.universe, seed=2)
    touched, peak, warm = np.unique(stream).size, int(unique_counts(stream).max()), s.sweep_steps // 4
    print(f"\nhit rate vs cache size: {s.sweep_steps} steps of {s.sweep_batch} keys, {touched:,} keys touched; "
          f"hit rates over the last {s.sweep_steps - warm} steps")
    rows = []
    for fraction in FRACTIONS:
        cache = int(fraction * touched)
        if cache < peak:
            raise SystemExit(f"hit rate sweep: a cache of {fraction:.0%} of {touched} keys ({cache} rows) cannot "
                             f"hold a batch's {peak} unique keys; use a smaller sweep batch or a longer stream")
        row = {"cache % of touched": 100 * fraction, "cache rows": cache}
        for policy in ("lru", "lfu"):
            table = EmbeddingTable(table_config(StoreOptions("host", cache_rows=cache, policy=policy)))
            with no_grad():
                for i, keys in enumerate(stream):
                    if i == warm:
                        before = table.stats()
                    table.lookup(keys)
            row[policy] = hit_rates(before, table.stats())[0]
        rows.append(row)
    return rows


def overhead(s):
    """Index, allocator and all other bytes per key beyond the rows, of device tables of growing size."""
    rows = []
    for n in s.overhead_keys:
        table = EmbeddingTable(table_config(StoreOptions(), dim=16, initializer=Initializer("zeros")))
        with no_grad():
            for start in range(0, n, 1 << 20):
                table.lookup(keys_of(np.arange(start, min(n, start + (1 << 20)))))
        st = table.stats()
        per_key = st["index_allocator_bytes_per_key"]
        rows.append({"keys": n, "index B/key": st["index_bytes"] / n, "allocator B/key": st["allocator_bytes"] / n,
                     "index+allocator B/key": per_key, "all overhead B/key": st["overhead_bytes_per_key"],
                     "<= 24 B": "yes" if per_key <= 24 else "no"})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, under a minute: a smoke run")
    ap.add_argument("--json", metavar="FILE", help="also write every table and the settings as JSON")
    ap.add_argument("--ssd-dir", metavar="DIR", help="where ssd tables go (default: a temporary folder)")
    add_arguments(ap)
    args = ap.parse_args(argv)
    info = backend.device_info()
    print(f"device: {info['device']} ({info.get('gpu', 'numpy')})")
    if args.beyond_ram:
        if args.ssd_dir is None:
            ap.error("--beyond-ram needs --ssd-dir DIR: a folder on the disk to test, with room for --ssd-gb")
        out = {"beyond_ram": beyond_ram(args)}
    else:
        s = QUICK if args.quick else FULL
        folder = tempfile.mkdtemp(prefix="bench_store_", dir=args.ssd_dir)
        try:
            bandwidth, label = copy_bandwidth(s.copy_bytes)
            rows = configs(s, folder)
        finally:
            shutil.rmtree(folder)
        rows[0]["% of copy"] = 100 * rows[0]["GB/s"] * 1e9 / bandwidth
        print_table(f"lookup + update, dim {DIM}, row-wise Adagrad; copy ceiling: {bandwidth / 1e9:.1f} GB/s ({label})",
                    rows, [("config", "config", "s"), ("keys/s", "keys/s", ",.0f"), ("rows/s", "rows/s", ",.0f"),
                           ("GB/s", "GB/s", ".3f"), ("% of copy", "% of copy", ".2f"),
                           ("vs device", "vs device", ".2f"), ("hit rates", "hit rates (top first)", "s"),
                           ("lower tiers MB/step", "lower tiers MB/step", ".1f")])
        sweep = hit_rate_sweep(s)
        print_table("hit rate of the device cache", sweep,
                    [("cache % of touched", "cache % of touched", ".0f"), ("cache rows", "rows", ",d"),
                     ("lru", "LRU", ".3f"), ("lfu", "LFU", ".3f")])
        over = overhead(s)
        print_table("overhead per key beyond the row (device table, dim 16; target: index + allocator <= 24 B)",
                    over, [("keys", "keys", ",d"), ("index B/key", "index", ".1f"),
                           ("allocator B/key", "allocator", ".1f"), ("index+allocator B/key", "index+allocator", ".1f"),
                           ("all overhead B/key", "all overhead", ".1f"), ("<= 24 B", "<= 24 B", "s")])
        out = {"copy_GB/s": bandwidth / 1e9, "copy": label, "sizes": dataclasses.asdict(s), "configs": rows,
               "hit_rate": sweep, "overhead": over}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "dim": DIM, "rule": "RowwiseAdagradRule", "alpha": 1.05, **out}, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
