"""One peer of ``tools/bench_train.py`` (TorchRec or plain torch) trained in a process that never imports gpuemb
or numba, on batches that ``bench_train.py --dump-batches`` wrote.

    python tools/bench_peer.py BATCHES.npz --side torchrec|torch [--json FILE]

Why a process of its own: numba's thread pool, once it has run a parallel kernel, keeps cores busy that torch's
own pool then waits for. TorchRec's step measured 14 to 25% slower in gpuemb's process than in one of its own
(issue 27), so a ratio taken in one process flatters gpuemb. ``tools/bench_sides.py`` runs each side this way.

The file holds the batches in the order gpuemb's Run trains them (its loader, seed 0) and the config's shape; the
model, the rule and the timing are ``bench_train_torchrec``'s and ``bench_train_torch``'s, as in one process. For a
DLRM it then times the step's MLP matmuls alone in torch (``gemm_floor.py``, on torch's BLAS), beside gpuemb's
floor on NumPy's: how much of a gap is the BLAS's.
"""
import argparse
import json
import os
import sys

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _entry
    _entry.guard()

import numpy as np

import bench_train_torch
import bench_train_torchrec
import gemm_floor

SIDES = ("torchrec", "torch")
SHAPE_KEYS = ("n_dense", "cardinalities", "dim", "bottom", "top", "cross", "hotness", "optimizer", "lr", "warmup",
              "steps", "batch_size")


class Batch:
    """What the peers read of a gpuemb batch: ``arrays()`` (label, dense, sparse) and ``rows``."""

    def __init__(self, label, dense, sparse):
        self.label, self.dense, self.sparse, self.rows = label, dense, sparse, len(label)

    def arrays(self):
        return self.label, self.dense, self.sparse


def load(path):
    """The shape (a dict of SHAPE_KEYS) and the batches of a ``--dump-batches`` file; a file that is not one is
    refused in one line."""
    try:
        with np.load(path, allow_pickle=False) as f:
            shape = json.loads(str(f["shape"]))
            arrays = [f[k] for k in ("label", "dense", "sparse")]
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"bench_peer.py: {path}: not a batch file of bench_train.py --dump-batches ({e}); write "
                         "one with: python tools/bench_train.py --dump-batches FILE --config NAME")
    missing = [k for k in SHAPE_KEYS if k not in shape]
    n = shape.get("warmup", 0) + shape.get("steps", 0)
    if missing or len(arrays[0]) != n:
        raise SystemExit(f"bench_peer.py: {path}: {'missing ' + ', '.join(missing) if missing else ''}"
                         f"{len(arrays[0])} batches for {n} steps; write it again with bench_train.py --dump-batches")
    return shape, [Batch(*(a[i] for a in arrays)) for i in range(n)]


def run(side, shape, batches):
    """The peer's samples/s and mean loss over the timed steps."""
    s = shape
    cross = tuple(s["cross"]) if s["cross"] else None
    if side == "torchrec":
        model = bench_train_torchrec.build(s["n_dense"], s["cardinalities"], s["dim"], s["bottom"], s["top"],
                                           s["optimizer"], s["lr"], cross=cross)
        return bench_train_torchrec.samples_per_s(model, iter(batches), s["warmup"], s["steps"], s["optimizer"],
                                                  s["lr"], s["hotness"])
    model = bench_train_torch.build(s["n_dense"], s["cardinalities"], s["dim"], s["bottom"], s["top"], s["hotness"],
                                    cross)
    return bench_train_torch.samples_per_s(model, iter(batches), s["warmup"], s["steps"], s["optimizer"], s["lr"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("batches", help="a file written by bench_train.py --dump-batches")
    ap.add_argument("--side", choices=SIDES, required=True,
                    help="the peer to train: TorchRec over FBGEMM, or plain torch")
    ap.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = ap.parse_args(argv)
    shape, batches = load(args.batches)
    if args.side == "torch" and shape["optimizer"] == "rowwise_adagrad":
        ap.error("plain torch has no row-wise Adagrad for its rows; pick another --optimizer when dumping")
    if args.side == "torchrec" and (why := bench_train_torchrec.available()):
        raise SystemExit(f"bench_peer.py: torchrec does not import here ({why}); tools/bench_train_torchrec.py says "
                         "how to install it")
    rate, loss = run(args.side, shape, batches)
    result = {"side": args.side, "samples_per_s": rate, "step_ms": 1e3 * shape["batch_size"] / rate, "loss": loss,
              "imported_gpuemb": "gpuemb" in sys.modules, "imported_numba": "numba" in sys.modules}
    floor = ""
    if not shape["cross"]:  # gemm_floor.py counts a DLRM's matmuls, not the cross layers'
        import torch
        bc = argparse.Namespace(**{k: shape[k] for k in ("dim", "bottom", "top")})
        result["gemm_floor_ms"] = gemm_floor.gemm_floor_ms(bc, shape["batch_size"], array=torch.from_numpy)
        floor = f"; its MLP matmuls alone in torch, {result['gemm_floor_ms']:.1f} ms"
    print(f"{args.side}: {rate:,.0f} samples/s ({result['step_ms']:.1f} ms a step, loss {loss:.4f}{floor})",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    _entry.run(main)
