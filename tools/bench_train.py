"""End-to-end training throughput of a DLRM (or MLPerf's DLRM-DCNv2), beside TorchRec's and a plain PyTorch model
of the same config, on the same batches, in the same run.

    python tools/bench_train.py [--config kaggle mlperf mlperf-dcnv2] [--batch-size 2048] [--steps 30] [--warmup 5]
                                [--stores device host ssd] [--pipeline on|off|both] [--optimizer RULE]
                                [--no-torchrec] [--no-torch] [--json FILE]

Configs (13 dense features; Criteo Kaggle's 26 cardinalities unless said, each capped at ``--cap``):
- ``kaggle``: dim 16, bottom MLP 512-256-64-16, top 512-256-1, tables capped at 1,000,000 rows (5.6M in all);
- ``mlperf``: dim 128, bottom 512-256-128, top 1024-1024-512-256-1, tables capped at 200,000 rows (1.5M in
  all, so that torch's dense tables and their Adagrad state fit a small machine's memory).
- ``mlperf-dcnv2``: MLPerf's DLRM-DCNv2 (``--preset mlperf-dcnv2`` of tools/train.py, docs/models.md): dim 128,
  bottom 512-256-128, whose output sits beside the 26 pooled embeddings, 3 low-rank cross layers of rank 512, top
  1024-1024-512-256-1; MLPerf's 26 cardinalities (not Kaggle's) capped at 200,000 rows (1.7M in all) and its
  multi-hot features, 214 ids a row summed per feature. TorchRec's peer is ``torchrec.models.dlrm.DLRM_DCN``, the
  plain one ``nn.EmbeddingBag`` bags with the same bottom, crosses and top. It trains about 600 samples/s on 2
  cores against kaggle's 30,000, so unless told it runs batches of 512, 3 warmup and 10 timed steps at lr 0.001
  (at 0.01 every side's loss passed 400 within the first steps): about 15 s a row, a minute with both peers and
  the device store.
Stores: ``device`` (every row in device memory), ``host`` (a device cache of 10% of the rows over host memory)
and ``ssd`` (an HDF5 file under a host cache under a device cache). The ssd store's caches are sized on the keys
the data touches, which are its table's rows by the end: 10% and 25% of them, the device cache at least twice a
batch's unique keys and the host cache at least twice the device cache. So the table outgrows its host cache and
evicted rows are read back from the file; caches sized on all the rows would hold a short run's table whole. The
data is synthetic, Zipf(1.05) ids per table, made before any timing; both sides read it through the same
``gpuemb.io`` Loader, so they train on the same batches in the same order. All use ``--optimizer`` on the rows
(sgd, adagrad or rowwise_adagrad; plain torch has no row-wise rule, so it sits that one out) and SGD or Adagrad on
the dense layers. The TorchRec peer (``bench_train_torchrec.py``, which says how to install it) fuses its rows'
update into the backward, as gpuemb does; the plain one steps ``nn.EmbeddingBag``'s sparse gradients with torch's
optimizer. A run trains ``--warmup`` steps (numba compiles, caches fill), then times ``--steps``: samples/s is
their samples over their seconds. Each row also says what its steps crossed between host and device and what they
launched and read back (autograd/launches.py), per step, all threads; the JSON has the launches by phase. All are
zero on the CPU, and on a GPU only the crossings and reads back are counted (tools/count_step.py counts the rest).

On the CPU, each DLRM config ends with its GEMM floor (``gemm_floor.py``: the step's MLP matmuls timed bare in the
same run) and each row's step time over it. ``--overhead`` adds the share of a step spent outside kernels and
BLAS, bounded from above by the step time at a tiny batch (``OVERHEAD_BATCH``, where the arrays are too small to
cost anything) over the step time at ``--batch-size``; ``--profile FILE`` writes a cProfile of the device store's
timed steps.

Absolute rates hold only on a quiet machine; compare the ratios, which come from the same run.
"""
import argparse
import cProfile
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

import gpuemb  # noqa: F401  first, so that its OpenBLAS setting holds when NumPy loads (gpuemb/host_tuning.py)
import numpy as np

import bench_train_torch
import bench_train_torchrec
import gemm_floor
from gpuemb.autograd import backend, launches, transfers
from gpuemb.io import synthetic
from gpuemb.io.loader import Loader, LoaderConfig
from gpuemb.kernels.mlp import PRECISIONS
from gpuemb.train import TrainConfig
from gpuemb.train.data import DataSet
from gpuemb.train.loop import Batches
from gpuemb.train.sections import TABLES
from gpuemb.train.run import Run

# the peer columns (of the model), strongest first
PEERS = {"torchrec": "TorchRec {} (FBGEMM TBE)", "torch": "torch {}"}
CACHE_FRACTION = 0.10  # the host store's device cache, as a share of all the rows of the tables
# The ssd store's device and host caches, as shares of the keys the data touches (the module docstring says why)
SSD_CACHE_FRACTION, SSD_HOST_CACHE_FRACTION = 0.10, 0.25
OVERHEAD_BATCH = 32
PER_CONFIG = ("batch_size", "steps", "warmup", "lr")  # settings a config sets, unless the flags do
DENSE = {"sgd": "sgd", "adagrad": "adagrad", "rowwise_adagrad": "adagrad"}  # the dense layers' rule, by the rows'


@dataclass(frozen=True)
class BenchConfig:
    """A model's shape: embedding dim, hidden widths of the bottom MLP (to the dim) and the top MLP, the cap on
    each table; ``cross``: DCN-v2's (layers, rank) of low-rank crosses over ``[embeddings, bottom]`` in place of
    DLRM's dot interaction; the tables' cardinalities before the cap and their ids a row (``hotness``, () is one
    each); the batch size and step counts a run takes unless its flags say otherwise."""
    dim: int
    bottom: tuple
    top: tuple
    cap: int
    cross: tuple = None
    full: tuple = synthetic.CRITEO_CARDINALITIES
    hotness: tuple = ()
    batch_size: int = 2048
    steps: int = 30
    warmup: int = 5
    lr: float = 0.01

    def cardinalities(self):
        return tuple(min(c, self.cap) for c in self.full)

    def model_settings(self):
        """The model settings of gpuemb's run of this shape. DLRM-DCNv2's rows start small, as its preset's do: a
        sum of 100 rows of uniform(±1/sqrt(D)) starts the loss far from log 2 (0.96 against the peers' 0.59 over
        4 steps at lr 0.001)."""
        if self.cross is None:
            return {"model": "dlrm", "model_args": {"bottom": list(self.bottom), "top": list(self.top)}}
        return {"model": "dcn", "model_args": {"bottom": [*self.bottom, self.dim], "n_cross": self.cross[0],
                                               "rank": self.cross[1], "deep": list(self.top)},
                "embedding_init": "normal", "embedding_init_scale": 0.01}

    @property
    def model_name(self):
        return "DLRM" if self.cross is None else "DCNv2"

    def describe(self):
        cross = (f", {self.cross[0]} low-rank cross layers of rank {self.cross[1]} over [embeddings, bottom]"
                 if self.cross else "")
        hot = f", {sum(self.hotness)} ids a row summed per feature" if self.hotness else ""
        return (f"dim {self.dim}, bottom {'-'.join(map(str, self.bottom + (self.dim,)))}{cross}, top "
                f"{'-'.join(map(str, self.top + (1,)))}, {len(self.full)} tables capped at {self.cap:,} "
                f"({sum(self.cardinalities()):,} rows){hot}")


# The DLRM shapes: tools/gemm_floor.py and tools/gpu_floor.py count their matmuls
CONFIGS = {"kaggle": BenchConfig(16, (512, 256, 64), (512, 256), 1_000_000),
           "mlperf": BenchConfig(128, (512, 256), (1024, 1024, 512, 256), 200_000)}
# The DCN-v2 ones, which the floors do not count (no dot interaction, and the crosses' matmuls)
DCN_CONFIGS = {"mlperf-dcnv2": BenchConfig(128, (512, 256), (1024, 1024, 512, 256), 200_000, cross=(3, 512),
                                           full=synthetic.MLPERF_CARDINALITIES, hotness=synthetic.MLPERF_HOTNESS,
                                           batch_size=512, steps=10, warmup=3, lr=0.001)}
ALL_CONFIGS = {**CONFIGS, **DCN_CONFIGS}


class MemorySource:
    """Synthetic rows made once, in memory, served as loader blocks: no side pays for the generator."""

    def __init__(self, config, n_rows, block_rows):
        self.rows, _ = synthetic.generate(config, 0, n_rows)
        self.n_rows, self.block_rows, self.layout = n_rows, block_rows, config.layout()
        self.block_sizes = np.diff(np.r_[np.arange(0, n_rows, block_rows), n_rows]).astype(np.int64)

    def read_block(self, i):
        return self.rows.slice(i * self.block_rows, i * self.block_rows + int(self.block_sizes[i]))


def dataset(bc, batch_size, n_batches, seed=0):
    """A DataSet of ``n_batches`` batches of the config's synthetic data."""
    cfg = synthetic.SyntheticConfig(cardinalities=bc.cardinalities(), hotness=bc.hotness, seed=seed)
    source = MemorySource(cfg, batch_size * n_batches, batch_size)
    return DataSet(source, source, cfg.n_dense, len(cfg.cardinalities), source.layout.label_names,
                   source.layout.sparse_names, "bench_train synthetic data",
                   hotness=cfg.hot if max(cfg.hot) > 1 else None)


def unique_keys(sparse, hot):
    """Distinct (table, id) pairs in ``sparse``, whose table t holds ``hot[t]`` columns side by side."""
    ends = np.cumsum(hot)
    return sum(np.unique(sparse[:, e - h:e]).size for e, h in zip(ends, hot))


def ssd_caches(data, batch_size):
    """The ssd store's caches for ``data``: (keys it touches, device cache rows, host cache rows); see the module
    docstring. A batch's unique keys are counted on the data's batches in order: the loader's shuffled ones are
    drawn alike."""
    sparse, hot = data.train.rows.sparse, data.hotness or (1,) * data.n_features
    touched = unique_keys(sparse, hot)
    peak = max(unique_keys(sparse[i:i + batch_size], hot) for i in range(0, len(sparse), batch_size))
    device = max(int(SSD_CACHE_FRACTION * touched), 2 * peak)  # a step's rows and the next one's prefetch
    return touched, device, max(int(SSD_HOST_CACHE_FRACTION * touched), 2 * device)


def train_config(bc, args, store, pipeline, batch_size, caches=None):
    """``caches``: the ssd store's (device, host) cache rows."""
    cache, host_cache = (int(CACHE_FRACTION * sum(bc.cardinalities())), 0) if caches is None else caches
    return TrainConfig.from_dict(dict(
        **bc.model_settings(), embedding_dim=bc.dim,
        batch_size=batch_size, optimizer=DENSE[args.optimizer], embedding_optimizer=args.optimizer, lr=args.lr,
        embedding_lr=args.lr, store=store, cache_rows=cache if store != "device" else 0,
        host_cache_rows=host_cache if store == "ssd" else 0, steps=args.warmup + args.steps + 1, progress=False,
        pipeline=pipeline, seed=0, precision=args.precision, tables=args.tables))


def ours(config, data, warmup, steps, profile=None):
    """Train a Run of ``config`` on ``data``; samples/s over the timed steps, their mean loss, the cache's hit rate."""
    run = Run(config, data)
    try:
        with run.pipeline as pipeline:
            for _ in range(warmup):
                pipeline.step()
            before = [t.stats()["levels"][0] for t in run.tables.values()]
            profiler = cProfile.Profile() if profile else None
            backend.synchronize()
            start, counted, launched = time.perf_counter(), transfers.COUNTS.snapshot(), launches.COUNTS.snapshot()
            if profiler:
                profiler.enable()
            losses = [pipeline.step() for _ in range(steps)]
            crossed, launched = transfers.COUNTS.since(counted), launches.COUNTS.since(launched)
            backend.synchronize()
            seconds = time.perf_counter() - start
            if profiler:
                profiler.disable()
                profiler.dump_stats(profile)
        after = [t.stats()["levels"][0] for t in run.tables.values()]
        hits = sum(a["hits"] - b["hits"] for a, b in zip(after, before))
        seen = hits + sum(a["misses"] - b["misses"] for a, b in zip(after, before))
        return {"samples_per_s": steps * config.optimization.batch_size / seconds, "step_ms": 1e3 * seconds / steps,
                "table_keys": sum(len(t) for t in run.tables.values()),
                "loss": float(np.mean(losses)), "hit_rate": hits / seen if seen else None,
                "prefetched": run.pipeline.prefetched, "prefetch_skipped": run.pipeline.skipped,
                "transfers_per_step": {k: v / steps for k, v in crossed.items()},
                "launches_per_step": launched_per_step(launched, steps)}
    finally:
        run.close()


def launched_per_step(launched, steps):
    """``launches.per_step``, with the launch counts None on a real GPU, where only the reads back are counted
    (autograd/launches.py): a 0 there would say the step launched nothing."""
    counts = launches.per_step(launched, steps)
    if backend.real_gpu():
        counts.update({f: None for f in launches.FIELDS if f != "readbacks"}, by_phase=None)
    return counts


def peer_batches(data, args):
    """The peers' batches of ``data``, as the Run's loader makes them (shuffled, seed 0): a context manager."""
    return Batches(Loader(data.train, LoaderConfig(args.batch_size, shuffle=True, seed=0)))


def peer(name, bc, data, args):
    """A peer's samples/s and mean loss on the same batches as ours (the Run's loader settings): "torchrec" or
    "torch"."""
    hot = data.hotness or (1,) * data.n_features
    if name == "torchrec":
        model = bench_train_torchrec.build(13, bc.cardinalities(), bc.dim, bc.bottom, bc.top, args.optimizer, args.lr,
                                           cross=bc.cross)
    else:
        model = bench_train_torch.build(13, bc.cardinalities(), bc.dim, bc.bottom, bc.top, hot, bc.cross)
    with peer_batches(data, args) as batches:
        if name == "torchrec":
            rate, loss = bench_train_torchrec.samples_per_s(model, batches, args.warmup, args.steps, args.optimizer,
                                                            args.lr, hot)
        else:
            rate, loss = bench_train_torch.samples_per_s(model, batches, args.warmup, args.steps, args.optimizer,
                                                         args.lr, cuda=backend.DEVICE == "cuda",
                                                         precision=args.precision)
    return {"samples_per_s": rate, "step_ms": 1e3 * args.batch_size / rate, "loss": loss}


def overhead(bc, args):
    """The device store's step time at OVERHEAD_BATCH over that at --batch-size: an upper bound on the share
    of a step outside kernels and BLAS."""
    out = {}
    for batch in (OVERHEAD_BATCH, args.batch_size):
        data = dataset(bc, batch, args.warmup + args.steps + 2)
        out[batch] = ours(train_config(bc, args, "device", True, batch), data, args.warmup, args.steps)["step_ms"]
    return {"tiny_batch": OVERHEAD_BATCH, "tiny_step_ms": out[OVERHEAD_BATCH], "step_ms": out[args.batch_size],
            "share": out[OVERHEAD_BATCH] / out[args.batch_size]}


def resolved(name, args):
    """The config ``name`` under the flags, and the flags with the config's own batch and step counts where they
    give none."""
    bc = ALL_CONFIGS[name]
    if args.cap:
        bc = replace(bc, cap=args.cap)
    return bc, argparse.Namespace(**{**vars(args), **{k: getattr(bc, k) if getattr(args, k) is None
                                                      else getattr(args, k) for k in PER_CONFIG}})


def dump_batches(name, args, path):
    """Write the batches the peers train on (as ``peer`` reads them: the Run's loader, seed 0) and the config's
    shape to ``path``, for ``bench_peer.py`` to train on in a process without gpuemb."""
    bc, args = resolved(name, args)
    data = dataset(bc, args.batch_size, args.warmup + args.steps + 2)
    with peer_batches(data, args) as batches:
        taken = [[np.array(backend.to_host(a)) for a in next(batches).arrays()]
                 for _ in range(args.warmup + args.steps)]
    shape = {"n_dense": 13, "cardinalities": bc.cardinalities(), "dim": bc.dim, "bottom": bc.bottom, "top": bc.top,
             "cross": bc.cross, "hotness": data.hotness or (1,) * data.n_features, "optimizer": args.optimizer,
             "lr": args.lr, "warmup": args.warmup, "steps": args.steps, "batch_size": args.batch_size}
    with open(path, "wb") as f:  # a file object: np.savez would add ".npz" to a name without it
        np.savez(f, shape=json.dumps(shape), **{k: np.stack([t[i] for t in taken])
                                                for i, k in enumerate(("label", "dense", "sparse"))})
    print(f"{name}: {args.warmup + args.steps} batches of {args.batch_size} written for bench_peer.py", flush=True)


def bench(name, args, pipelines):
    """Every row of one config: torch first, then each store and pipeline setting."""
    bc, args = resolved(name, args)
    data = dataset(bc, args.batch_size, args.warmup + args.steps + 2)
    print(f"\n{name}: {bc.describe()}, batch {args.batch_size}, {args.warmup} + {args.steps} timed steps, "
          f"{args.optimizer} lr {args.lr:g}", flush=True)
    touched, ssd_cache, ssd_host_cache = ssd_caches(data, args.batch_size)
    print(f"  caches: host store, device {int(CACHE_FRACTION * sum(bc.cardinalities())):,} rows; ssd store, device "
          f"{ssd_cache:,} and host {ssd_host_cache:,} rows, over a table of the {touched:,} keys the data touches",
          flush=True)
    peers = {}
    for who in PEERS:  # not ``name``, the config's, which the rows and the result record
        if getattr(args, who):
            peers[who] = p = peer(who, bc, data, args)
            print(f"  {PEERS[who].format(bc.model_name):<27}{p['samples_per_s']:>12,.0f} samples/s  "
                  f"({p['step_ms']:.1f} ms a step, "
                  f"loss {p['loss']:.4f})", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        for store in args.stores:
            for pipeline in pipelines:
                config = train_config(bc, args, store, pipeline, args.batch_size,
                                      (ssd_cache, ssd_host_cache) if store == "ssd" else None)
                if store == "ssd":
                    config = config.replace(ssd_dir=tmp)
                profile = args.profile if store == "device" and pipeline == pipelines[0] else None
                r = {"config": name, "store": store, "pipeline": "on" if pipeline else "off",
                     **ours(config, data, args.warmup, args.steps, profile)}
                for who, p in peers.items():
                    r[f"vs_{who}"] = r["samples_per_s"] / p["samples_per_s"]
                device = next((x for x in rows if x["store"] == "device" and x["pipeline"] == r["pipeline"]), None)
                r["vs_device"] = r["samples_per_s"] / device["samples_per_s"] if device else None
                rows.append(r)
                print("  " + format_row(r), flush=True)
                if store == "ssd" and r["table_keys"] <= ssd_host_cache:
                    print(f"    the ssd table's {r['table_keys']:,} keys fit its host cache: no evicted row came "
                          "back from the file (more --steps or a larger --batch-size)", flush=True)
    result = {"config": name, "shape": asdict(bc), **{k: getattr(args, k) for k in PER_CONFIG},
              "rows_in_tables": sum(bc.cardinalities()),
              "cache_rows": int(CACHE_FRACTION * sum(bc.cardinalities())), "touched_keys": touched,
              "ssd_cache_rows": ssd_cache, "ssd_host_cache_rows": ssd_host_cache, "peers": peers, "rows": rows}
    if backend.DEVICE == "cpu" and bc.cross is not None:
        print("  no GEMM floor: tools/gemm_floor.py counts a DLRM's matmuls, not the cross layers'", flush=True)
    elif backend.DEVICE == "cpu":  # NumPy's BLAS is the CPU step's; a GPU's floor is tools/gpu_floor.py's
        result["gemm_floor_ms"] = f = gemm_floor.gemm_floor_ms(bc, args.batch_size)
        for r in rows:
            r["vs_gemm_floor"] = r["step_ms"] / f
        best = min(r["step_ms"] for r in rows) if rows else None
        print(f"  GEMM floor (the step's MLP matmuls timed bare, same run): {f:.1f} ms"
              + (f"; the fastest step above is {best / f:.2f}x it" if best else ""), flush=True)
    if args.overhead:
        result["overhead"] = overhead(bc, args)
        o = result["overhead"]
        print(f"  outside kernels and BLAS: at most {100 * o['share']:.0f}% of a step ({o['tiny_step_ms']:.1f} ms "
              f"at batch {o['tiny_batch']} against {o['step_ms']:.1f} ms)", flush=True)
    return result


def format_row(r):
    def ratio(key):
        return f"{r[key]:.2f}" if r.get(key) is not None else "-"
    t = r["transfers_per_step"]  # host-device crossings: all zero on the CPU, where nothing crosses
    n = r["launches_per_step"]  # all zero on the CPU too; on a GPU only the reads back are counted, the rest None
    launched = ("launches not counted on a GPU (tools/count_step.py counts them on the emulated device)"
                if n["numba"] is None else
                f"{n['numba']:.1f} numba kernels, {n['cupy']:.1f} CuPy calls, {n['cublaslt']:.1f} cuBLASLt calls")
    hit = f"{r['hit_rate']:.2f}" if r["hit_rate"] is not None and r["store"] != "device" else "-"
    return (f"gpuemb {r['store']:<6} pipeline {r['pipeline']:<3} {r['samples_per_s']:>12,.0f} samples/s  "
            f"({r['step_ms']:.1f} ms, loss {r['loss']:.4f})  vs torchrec {ratio('vs_torchrec')}  vs torch "
            f"{ratio('vs_torch')}  vs device {ratio('vs_device')}  "
            f"cache hits {hit}\n    per step: {t['to_device']:.1f} to the device, {t['to_host']:.1f} to the host, "
            f"{t['syncs']:.1f} syncs, {t['bytes'] / 1e6:.2f} MB\n    launched per step: {launched}; "
            f"{n['readbacks']:.1f} reads back")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", nargs="+", choices=sorted(ALL_CONFIGS), default=["kaggle"], help="default: kaggle")
    ap.add_argument("--batch-size", type=int, help="default: the config's, 2048 (mlperf-dcnv2: 512)")
    ap.add_argument("--steps", type=int, help="timed steps per row (default: the config's, 30; mlperf-dcnv2: 10)")
    ap.add_argument("--warmup", type=int, help="steps before timing (default: the config's, 5; mlperf-dcnv2: 3)")
    ap.add_argument("--stores", nargs="+", choices=("device", "host", "ssd"), default=["device", "host", "ssd"],
                    help="where gpuemb's rows live, a row of results each: device memory, host memory under a device "
                    "cache, or an HDF5 file under both caches (default: all three)")
    ap.add_argument("--pipeline", choices=("on", "off", "both"), default="both",
                    help="prepare each batch while the last one computes (on), after it (off), or a row of each "
                    "(default both)")
    ap.add_argument("--optimizer", choices=tuple(DENSE), default="adagrad",
                    help="the rows' rule on every side, and SGD or Adagrad for the dense layers (default adagrad)")
    ap.add_argument("--lr", type=float, help="every side's rows and dense layers (default: the config's, 0.01; "
                    "mlperf-dcnv2: 0.001)")
    ap.add_argument("--cap", type=int, help="rows per table at most (default: the config's)")
    ap.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                    help="the dense layers' compute on a GPU, on every side (plain torch: TF32 matmuls for tf32, "
                    "autocast for bf16 and fp16; default fp32)")
    ap.add_argument("--tables", choices=TABLES, default="shared",
                    help="gpuemb's tables: one shared by every feature, or one per feature (default shared; the "
                    "peers have one per feature)")
    ap.add_argument("--dump-batches", metavar="FILE", help="write the peers' batches and the config's shape to FILE "
                    "for tools/bench_peer.py, then stop (one --config)")
    ap.add_argument("--no-torchrec", dest="torchrec", action="store_false", help="skip the TorchRec peer")
    ap.add_argument("--no-torch", dest="torch", action="store_false", help="skip the plain PyTorch peer")
    ap.add_argument("--overhead", action="store_true", help="also bound the share of a step outside kernels/BLAS")
    ap.add_argument("--profile", metavar="FILE", help="cProfile the device store's timed steps into FILE")
    ap.add_argument("--json", metavar="FILE", help="also write every row and the settings as JSON")
    args = ap.parse_args(argv)
    if any(v is not None and v < 1 for v in (args.batch_size, args.steps)) or (args.warmup or 0) < 0:
        ap.error("--batch-size and --steps must be >= 1, --warmup >= 0")
    if args.precision != "fp32" and backend.DEVICE == "cpu":
        ap.error(f"--precision {args.precision} runs on a GPU only; use --precision fp32 here")
    if args.torch and not bench_train_torch.available():
        print("torch does not import here: no plain torch column (install torch, or pass --no-torch)")
        args.torch = False
    if args.torch and args.optimizer == "rowwise_adagrad":
        print("plain torch has no row-wise Adagrad for its rows: no plain torch column")
        args.torch = False
    why = bench_train_torchrec.available() if args.torchrec else None
    if args.torchrec and backend.DEVICE != "cpu":  # its CPU build against our GPU would flatter us
        why = "the peer is wired for FBGEMM's CPU build only; its CUDA table-batched embedding is not yet"
    if why:
        print(f"torchrec does not import here ({why}): no TorchRec column; tools/bench_train_torchrec.py says how "
              "to install it, or pass --no-torchrec")
        args.torchrec = False
    if args.dump_batches:
        if len(args.config) != 1:
            ap.error("--dump-batches writes one config's batches: give one --config")
        dump_batches(args.config[0], args, args.dump_batches)
        return 0
    pipelines = {"on": (True,), "off": (False,), "both": (True, False)}[args.pipeline]
    info = backend.device_info()
    print(f"device: {info['device']} ({info.get('gpu', 'numpy')}); load average {os.getloadavg()[0]:.2f}")
    results = [bench(name, args, pipelines) for name in args.config]
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if k not in ("json", "profile")}  # no local paths
            for k in PER_CONFIG:  # what ran, where every config ran the same (tools/gpu_floor.py reads the batch)
                ran = {r[k] for r in results}
                settings[k] = ran.pop() if len(ran) == 1 else None
            json.dump({"device": info, "settings": settings, "alpha": synthetic.SyntheticConfig().alpha,
                       "load_average": os.getloadavg(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    _entry.run(main)
