"""How long the initial rows of new keys take to draw (gpuemb/store/init.py), for each kind and each draw.

    python tools/bench_init.py [--keys 100000] [--dim 128] [--repeats 7] [--json FILE]

Each (kind, draw) pair draws the rows of ``--keys`` fresh random keys at ``--dim`` into float32, as a table of
that dim would on its first batches; the pairs run interleaved, round by round, and each row is the median of
``--repeats`` rounds, after one uncounted round that compiles the kernels. Draw 1 makes one Philox call a column;
draw 2, the default, one for four. On a device (``GPUEMB_DEVICE=cuda``) the keys are on the device and each round
ends with a synchronize.
"""
import argparse
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _entry
    _entry.guard()

import numpy as np

from gpuemb.autograd import backend
from gpuemb.store.init import initial_weights
from gpuemb.store.options import DRAWS, INIT_KINDS, Initializer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000, help="new keys a draw (default %(default)s)")
    ap.add_argument("--dim", type=int, default=128, help="columns a row (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds (default %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if args.keys < 1 or args.dim < 1 or args.repeats < 1:
        ap.error("--keys, --dim and --repeats take a count >= 1")
    rng = np.random.default_rng()
    pairs = [(kind, draw) for kind in INIT_KINDS if kind != "zeros" for draw in DRAWS]
    times = {p: [] for p in pairs}
    for r in range(args.repeats + 1):
        keys = backend.to_device(rng.integers(-2 ** 63, 2 ** 63, args.keys))
        for kind, draw in pairs[r % len(pairs):] + pairs[:r % len(pairs)]:  # each round starts one pair later
            init = Initializer(kind, seed=int(rng.integers(2 ** 63)), draw=draw)
            backend.synchronize()
            start = time.perf_counter()
            initial_weights(init, keys, args.dim)
            backend.synchronize()
            if r:
                times[kind, draw].append(time.perf_counter() - start)
    rows = [{"kind": kind, "draw": draw, "ms": 1e3 * statistics.median(times[kind, draw]),
             "ns_per_element": 1e9 * statistics.median(times[kind, draw]) / (args.keys * args.dim)}
            for kind, draw in pairs]
    print(f"device {backend.DEVICE}; {args.keys:,} keys of dim {args.dim}; median of {args.repeats} rounds; load "
          f"average {os.getloadavg()[0]:.1f}")
    for row in rows:
        first = next(r for r in rows if r["kind"] == row["kind"])
        print(f"{row['kind']:<17} draw {row['draw']}  {row['ms']:8.1f} ms  {row['ns_per_element']:6.2f} ns an element"
              f"  {first['ms'] / row['ms']:5.2f}x draw {first['draw']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": backend.DEVICE, "keys": args.keys, "dim": args.dim, "repeats": args.repeats,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
