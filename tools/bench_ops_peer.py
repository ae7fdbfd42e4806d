"""The peer of ``tools/bench_ops.py``'s embedding ops: the same shape's forward and backward+update, timed in a
process of its own, away from gpuemb's threads.

    python tools/bench_ops_peer.py --shape FILE [--device cpu|cuda] [--budget SECONDS]

It prints one JSON object on stdout: ``{"peer": name or null, "note": why or null, "forward_s", "backward_s"}``.
The peer is the first of these that imports here and runs the shape:

- FBGEMM's table-batched embedding (``SplitTableBatchedEmbeddingBagsCodegen``; tools/bench_train_torchrec.py says
  how to install its CPU build): every table in one op, the rows' rule fused into the backward (EXACT_SGD,
  EXACT_ADAGRAD, EXACT_ROWWISE_ADAGRAD; FBGEMM's CPU build refuses Adam), fp32 or fp16 rows rounded to nearest
  (as gpuemb's), sum or mean pooling;
- torch's ``nn.EmbeddingBag``, one per table, ``sparse=True`` (max pooling has no sparse gradient in torch, so
  there it is dense), stepped by torch's SGD, Adagrad or SparseAdam (none has a row-wise Adagrad or FTRL).

Both take the batches ``bench_shape.OpShape.batches`` draws from the shape, so the ids are gpuemb's, and time as
``bench_clock.median_seconds`` does: the forward alone, and the backward+update after an untimed forward.
"""
import argparse
import json
import os
import sys

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import numpy as np

import bench_shape
from bench_clock import median_seconds

FBGEMM_RULES = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ADAGRAD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD"}
TORCH_RULES = {"sgd": "SGD", "adagrad": "Adagrad", "adam": "SparseAdam"}
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}


def fbgemm_tbe(torch, shape, device):
    """``(name, forward(batch), backward(out, gy))`` of FBGEMM's TBE, or a reason it cannot run the shape."""
    try:
        import fbgemm_gpu
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                            SplitTableBatchedEmbeddingBagsCodegen)
    except Exception as e:  # an ImportError, or FBGEMM's native library refusing this torch
        return f"FBGEMM does not import ({type(e).__name__})"
    why = (f"FBGEMM's TBE has no {shape.optimizer} here" if shape.optimizer not in FBGEMM_RULES else
           f"FBGEMM's TBE pools by sum or mean, not {shape.pooling}" if shape.pooling not in ("sum", "mean") else
           f"FBGEMM's TBE trains fp32 or fp16 rows, not {shape.precision}" if shape.precision == "fp64" else None)
    if why:
        return why
    place = (EmbeddingLocation.HOST, ComputeDevice.CPU) if device == "cpu" else (EmbeddingLocation.DEVICE,
                                                                                 ComputeDevice.CUDA)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, *place) for rows, dim in zip(shape.per_table("rows"), shape.per_table("dims"))],
        optimizer=getattr(EmbOptimType, FBGEMM_RULES[shape.optimizer]), learning_rate=shape.lr,
        weights_precision=SparseType.FP16 if shape.precision == "fp16" else SparseType.FP32,
        stochastic_rounding=False, pooling_mode=getattr(PoolingMode, shape.pooling.upper()), device=device)

    def forward(batch):
        values, offsets, _ = batch
        return tbe(values, offsets)
    return f"FBGEMM {fbgemm_gpu.__version__} TBE", forward, lambda out, gy: out.backward(gy)


def torch_bags(torch, shape, device):
    """``(name, forward(batch), backward(out, gy))`` of one ``nn.EmbeddingBag`` a table, or why it cannot run."""
    if shape.optimizer not in TORCH_RULES:
        return f"torch has no {shape.optimizer} for sparse rows"
    sparse = shape.pooling != "max"
    dtype = getattr(torch, TORCH_DTYPES[shape.precision])
    bags = [torch.nn.EmbeddingBag(rows, dim, mode=shape.pooling, sparse=sparse, dtype=dtype, device=device)
            for rows, dim in zip(shape.per_table("rows"), shape.per_table("dims"))]
    params = [b.weight for b in bags]
    rule = TORCH_RULES[shape.optimizer] if sparse or shape.optimizer != "adam" else "Adam"
    step = getattr(torch.optim, rule)(params, lr=shape.lr)

    def forward(batch):
        _, _, tables = batch
        return torch.cat([bag(v, o) for bag, (v, o) in zip(bags, tables)], dim=1)

    def backward(out, gy):
        out.backward(gy)
        step.step()
        step.zero_grad(set_to_none=True)
    kind = "sparse" if sparse else "dense gradient (max)"
    return f"torch {torch.__version__.split('+')[0]} EmbeddingBag, {kind}", forward, backward


def torch_batch(torch, shape, values, lengths, device):
    """``(values, offsets [T·B + 1], per table (values, offsets [B]))`` on ``device``: the TBE's and the bags'."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    B = shape.batch
    tables = [(torch.as_tensor(values[offsets[t * B]:offsets[(t + 1) * B]], device=device),
               torch.as_tensor(offsets[t * B:(t + 1) * B] - offsets[t * B], device=device))
              for t in range(shape.tables)]
    return torch.as_tensor(values, device=device), torch.as_tensor(offsets, device=device), tables


def measure(shape, device, budget):
    """The result object of the module docstring."""
    try:
        import torch
    except ImportError:
        return {"peer": None, "note": "neither FBGEMM nor torch imports here: no peer (pip install torch)"}
    reasons = []
    for make in (fbgemm_tbe, torch_bags):
        found = make(torch, shape, device)
        if isinstance(found, str):
            reasons.append(found)
            continue
        name, forward, backward = found
        batches = [torch_batch(torch, shape, v, n, device) for v, n in shape.batches(bench_shape.N_BATCHES)]
        turn = iter(range(1 << 62))

        def fresh():
            return forward(batches[next(turn) % len(batches)])
        first = fresh()
        gy = torch.as_tensor(np.random.default_rng(shape.seed).standard_normal(tuple(first.shape)),
                             dtype=first.dtype, device=device)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        timing = dict(sync=sync, warmup=2 * len(batches), budget=budget)
        fwd = median_seconds(fresh, **timing)
        bwd = median_seconds(lambda out: backward(out, gy), setup=fresh, **timing)
        return {"peer": name, "note": "; ".join(reasons) or None, "forward_s": fwd, "backward_s": bwd}
    return {"peer": None, "note": "; ".join(reasons) + ": no peer"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, metavar="FILE", help="a JSON shape, as bench_ops.py --shape takes")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the peer runs (default cpu)")
    ap.add_argument("--budget", type=float, default=0.4, help="seconds to spend timing each op (default 0.4)")
    args = ap.parse_args(argv)
    try:
        shape = bench_shape.resolve({}, args.shape)
    except bench_shape.ShapeError as e:
        print(f"bench_ops_peer.py: {e}", file=sys.stderr)
        return 2
    print(json.dumps(measure(shape, args.device, args.budget)))
    return 0


if __name__ == "__main__":
    _entry.run(main)
