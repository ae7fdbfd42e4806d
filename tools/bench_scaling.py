"""A scaling report: a tiny DLRM on W = 1, 2, 4 ranks of this machine over a modelled link, then a projection of
the Criteo-1TB MLPerf config (DLRM-DCNv2) to 8, 64 and 512 GPUs.

    python tools/bench_scaling.py [--world-sizes 1 2 4] [--link ib400] [--steps 20] [--batch-size 1024]
                                  [--gpus 8 64 512] [--gpu-samples-per-s 1059405]

**Measured.** Each W is a job of its own, ``mpiexec -n W python tools/train.py --link LINK ...`` (W = 1: plain
python), on the synthetic 'quick' data with one table per feature (26), table-wise by the planner. From the last
train record of rank 0 (docs/metrics.md): samples/s per rank (the job's over W); the share of the step spent in
exposed communication, ``exposed_comm_s / (compute_s + exposed_comm_s)``; the share of the link's own time left
exposed, at least and at most, ``exposed_link_min_s`` and ``exposed_link_max_s`` over ``modelled_s`` (the rest of
the exposed time is a wait for a late rank or for the real transport: ``gpuemb/comm/timeline.py``); the embedding
all-to-alls' bytes on the wire per sample (``a2a_keys + a2a_fwd + a2a_bwd``, all ranks, over the global batch),
beside the cost model's (``gpuemb/sharding/cost.py``: ``a2a_fwd + a2a_bwd`` of ``rank_costs`` of the plan the run
made) plus the framing it leaves out, one int64 count per stream to each peer: ``W·(W−1)·S·8`` bytes a step for S
streams; and which collectives the exposed time waited on, as shares of it (``exposed_by_tag_s``).

**Projected** (``_scaling_projection.py`` has the formulas): the Criteo-1TB tables (``--preset criteo-1tb``) with
MLPerf's hotness, dim 128, global batch 65536, planned by ``plan_tables`` on N GPUs of ``--device-gb``. Compute
per GPU is ``(65536/N) / R``, ``R`` the samples/s of one H200 on the mlperf config with the device store
(docs/perf/README.md, "On the first GPU run", End to end at batch 65536), assumed the same at every batch. The
all-to-alls send the busiest rank's ``a2a_fwd + a2a_bwd``; the allreduces the dense parameters (the DCNv2 model
built) and the data-parallel tables, in the runtime's buckets (a quarter, at most 4 MiB); every collective's
header counts as one all-to-all more. NVLink 4 within a node of 8, InfiniBand NDR between nodes.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from _scaling_projection import project

from gpuemb import models, optim
from gpuemb.comm import traffic
from gpuemb.comm.link import PRESETS, parse_link
from gpuemb.distributed.default_plan import DEFAULT_DEVICE_BYTES, plan_for
from gpuemb.io.synthetic import MLPERF_HOTNESS
from gpuemb.sharding import RankBudget, plan_tables
from gpuemb.sharding.cost import KEY_BYTES, rank_costs
from gpuemb.sharding.presets import preset_tables
from gpuemb.store.options import StoreOptions, TableConfig
from gpuemb.train.cli import Parser
from gpuemb.train.recipes import RUN_PRESETS

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
FEATURES = 26  # the synthetic 'quick' data's sparse features, one table each
NODE = 8
MLPERF_BATCH = 65536
H200_SAMPLES_PER_S = 1_059_405  # docs/perf/README.md, "On the first GPU run": mlperf at batch 65536, device store
A2A_PER_STEP = 4  # pooled exchange: the counts, the lengths and keys, the rows, their gradients
EMBEDDING_TAGS = ("a2a_keys", "a2a_fwd", "a2a_bwd", "column_sums", "dp_allgather")


class RunError(Exception):
    """A train.py job that failed or ran too long; its message is one line."""


def mpiexec():
    """The mpiexec beside this python (pip's mpich wheel puts it there) or on PATH, else None."""
    return shutil.which("mpiexec", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))


def train_args(args, metrics, overlap=False):
    return [*(["--overlap-comm"] if overlap else []), "--tables", "per-feature", "--embedding-dim",
            str(args.embedding_dim), "--batch-size",
            str(args.batch_size), "--steps", str(args.steps), "--log-every", str(args.steps // 2), "--eval-every",
            str(args.steps), "--eval-rows", "1000", "--train-rows", str(args.batch_size * args.steps),
            "--comm-codec", args.codec, "--sharding", args.sharding, "--link", args.link, "--no-progress",
            "--metrics-out", metrics]


def run_job(W, args, folder, overlap=False):
    """The last train record of ``tools/train.py`` on W ranks (rank 0's), with ``--overlap-comm`` or not."""
    metrics = os.path.join(folder, f"w{W}-{overlap}.jsonl")
    launcher = [mpiexec(), "-n", str(W)] if W > 1 else []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_"))}
    env.update({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"})  # the ranks share the cores
    try:
        done = subprocess.run(launcher + [sys.executable, TRAIN, *train_args(args, metrics, overlap)],
                              capture_output=True, text=True, timeout=args.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise RunError(f"W={W}: train.py ran past --timeout-s {args.timeout_s}; give fewer --steps or a smaller "
                       "--batch-size") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RunError(f"W={W}: train.py exited {done.returncode}: {last}")
    with open(metrics) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "train"][-1]


def model_bytes(W, args):
    """``(bytes, framing)`` of a step's embedding all-to-alls, all ranks: the cost model's for the plan the run
    makes (``distribute``'s ``plan_for``), and the counts it leaves out."""
    rule = optim.RULES["rowwise_adagrad"]()
    configs = [TableConfig(f"C{i + 1}", args.embedding_dim, rule=rule) for i in range(FEATURES)]
    plan = plan_for(configs, W, batch_size=args.batch_size, codec=args.codec, sharding=args.sharding)
    streams = sum(len(p.shards) if p.kind == "column" else 1 for p in plan.placements if p.kind != "data")
    sent = sum(c.a2a_fwd + c.a2a_bwd for c in rank_costs(plan))
    return sent, W * (W - 1) * streams * KEY_BYTES


def measured_row(W, record, args, overlap=False):
    """The report's figures for one W from its last train record."""
    link = record.get("link", {})
    exposed, compute, comm = link.get("exposed_comm_s", 0.0), link.get("compute_s", 0.0), link.get("comm_s", 0.0)
    wire = sum(record.get("comm_bytes_per_step", {}).get(t, 0) for t in EMBEDDING_TAGS)
    model, framing = model_bytes(W, args)
    return {"W": W, "overlap": overlap, "per_rank": record["samples_per_s"] / W,
            "step_ms": 1e3 * (compute + exposed),
            "share": exposed / (compute + exposed) if compute + exposed else 0.0,
            "comm_ms": 1e3 * comm, "exposed_of_comm": exposed / comm if comm else 0.0,
            "modelled_ms": 1e3 * link.get("modelled_s", 0.0),
            "link_exposed": tuple(link.get(f"exposed_link_{b}_s", 0.0) / link["modelled_s"] if link.get("modelled_s")
                                  else 0.0 for b in ("min", "max")),
            "wire": wire / args.batch_size,
            "model": model / args.batch_size, "framing": framing / args.batch_size,
            "exposed_by_tag": {t: v / exposed for t, v in link.get("exposed_by_tag_s", {}).items()} if exposed
            else {}}


def print_measured(rows, args):
    print(f"Measured: tools/train.py, DLRM, 26 per-feature tables of dim {args.embedding_dim}, global batch "
          f"{args.batch_size}, {args.codec} all-to-alls, --sharding {args.sharding}, --link {args.link}; rank 0's "
          f"last train record (steps {args.steps // 2 + 1}-{args.steps})")
    print("| W | overlap | samples/s per rank | step ms (compute + exposed) | exposed comm share | comm ms | "
          "exposed / comm | link's own ms (modelled_s) | link's exposed / link's own, at least-most "
          "| a2a B/sample on the wire | cost model B/sample | + framing | wire / (model + framing) "
          "| exposed, by collective |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['wire'] / (r['model'] + r['framing']):.4f}" if r["model"] else "-"
        tags = sorted(r["exposed_by_tag"].items(), key=lambda kv: -kv[1])
        by_tag = ", ".join(f"{t} {100 * v:.0f}%" for t, v in tags if v >= 0.005) or "-"
        print(f"| {r['W']} | {'on' if r['overlap'] else 'off'} | {r['per_rank']:,.0f} | {r['step_ms']:.1f} | "
              f"{100 * r['share']:.1f}% | {r['comm_ms']:.2f} | {100 * r['exposed_of_comm']:.0f}% | "
              f"{r['modelled_ms']:.3f} | {100 * r['link_exposed'][0]:.0f}-{100 * r['link_exposed'][1]:.0f}% | "
              f"{r['wire']:,.1f} | {r['model']:,.1f} | {r['framing']:,.2f} | {ratio} | {by_tag} |")


def dense_bytes():
    """Bytes of MLPerf DLRM-DCNv2's dense parameters (float32), from the model built (tiny slabs: rows unused)."""
    hyper = RUN_PRESETS["mlperf-dcnv2"].settings["model_args"]
    tables = [TableConfig(f"C{i + 1}", 128, options=StoreOptions(slab_rows=16)) for i in range(FEATURES)]
    model = models.build("dcn", 13, tables, 0, **hyper)
    return 4 * sum(p.data.size for p in model.parameters())


def mlperf_traffic(gpus, args, dense):
    """``(a2a, headers, allreduce)`` a rank sends per step of the MLPerf config on ``gpus``, each ``(bytes,
    collectives)``: the busiest rank's all-to-alls, every collective's header, the allreduces."""
    tables = [replace(t, lookups_per_sample=h) for t, h in zip(preset_tables("criteo-1tb"), MLPERF_HOTNESS)]
    plan = plan_tables(tables, [RankBudget(args.device_gb * 10**9)] * gpus, MLPERF_BATCH, args.codec)
    busiest = max(c.a2a_fwd + c.a2a_bwd for c in rank_costs(plan))
    replicas = sum(p.table.rows * p.table.dim * p.table.itemsize for p in plan.placements if p.kind == "data")
    # the dense buckets (distribute()'s default size), the replicas, the loss
    reduces = math.ceil(dense / traffic.bucket_bytes(dense)) + (1 if replicas else 0) + 1
    headers = A2A_PER_STEP + reduces
    return (busiest, A2A_PER_STEP), (headers * traffic.header_traffic(gpus)[1], headers), (dense + replicas, reduces)


def print_projection(args):
    dense = dense_bytes()
    intra, inter = PRESETS["nvlink4"], parse_link(args.inter_link)
    print(f"\nProjected: Criteo-1TB (26 tables, MLPerf's hotness, dim 128), DLRM-DCNv2 ({dense / 4e6:.2f} M dense "
          f"parameters), global batch {MLPERF_BATCH}, {args.codec} all-to-alls, planned on GPUs of "
          f"{args.device_gb} GB; compute R = {args.gpu_samples_per_s:,.0f} samples/s a GPU (measured on one H200, "
          f"assumed at every batch); {intra.name} within a node of {NODE}, {inter.name} between nodes")
    print("| GPUs | samples a GPU | compute ms | a2a MB (busiest rank) | a2a ms | headers MB | headers ms | "
          "allreduce MB | allreduce ms | step ms, no overlap | step ms, perfect overlap | samples/s, no overlap | "
          "samples/s, perfect overlap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.gpus:
        a2a, headers, allreduce = mlperf_traffic(n, args, dense)
        p = project(n, MLPERF_BATCH, args.gpu_samples_per_s, a2a, headers, allreduce, NODE, intra, inter)
        print(f"| {n} | {MLPERF_BATCH // n:,} | {1e3 * p.compute_s:.3f} | {a2a[0] / 1e6:.1f} | {1e3 * p.a2a_s:.3f} | "
              f"{headers[0] / 1e6:.1f} | {1e3 * p.headers_s:.3f} | {allreduce[0] / 1e6:.1f} | "
              f"{1e3 * p.allreduce_s:.3f} | {1e3 * p.no_overlap_s:.3f} | {1e3 * p.overlap_s:.3f} | "
              f"{MLPERF_BATCH / p.no_overlap_s:,.0f} | {MLPERF_BATCH / p.overlap_s:,.0f} |")
    print("compute = (65536/N)/R; a2a (and headers) = max((G-1)c·α_nv + S(G-1)/(N-1)/β_nv, (N-G)c·α_ib + "
          "S(N-G)/(N-1)/β_ib); allreduce = c·2(G-1)α_nv + 2(G-1)/G·n/β_nv + "
          "c·2(m-1)α_ib + 2(m-1)/m·(n/G)/β_ib; G = 8 "
          "a node, m = N/G nodes, c collectives, S and n bytes a rank; no overlap = compute + a2a + headers + "
          "allreduce; perfect overlap = max(compute, a2a + headers + allreduce). A projection, not a measurement.")


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive int")
    return value


def parse(argv=None):
    ap = Parser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--world-sizes", type=positive_int, nargs="+", default=[1, 2, 4],
                    help="the W to measure, each a job of W ranks (default 1 2 4)")
    ap.add_argument("--link", default="ib400",
                    help="the modelled link of the measured jobs: ib100, ib400, nvlink4 or LAT_US:GBPS (default ib400)")
    ap.add_argument("--steps", type=positive_int, default=20,
                    help="steps of each measured job; the last half is the record read (default 20)")
    ap.add_argument("--batch-size", type=positive_int, default=1024, help="the measured jobs' global batch "
                    "(default 1024)")
    ap.add_argument("--embedding-dim", type=positive_int, default=16, help="the measured tables' dim (default 16)")
    ap.add_argument("--codec", choices=("fp32", "fp16", "bf16", "int8"), default="fp32",
                    help="the all-to-alls' wire format, measured and projected (default fp32)")
    ap.add_argument("--sharding", choices=("auto", "table", "row", "column"), default="auto",
                    help="the measured jobs' placement (default auto: the planner)")
    ap.add_argument("--timeout-s", type=positive_int, default=600, help="seconds each measured job may run "
                    "(default 600)")
    ap.add_argument("--gpus", type=positive_int, nargs="+", default=[8, 64, 512],
                    help=f"GPU counts to project, each a multiple of the node's {NODE} (default 8 64 512)")
    ap.add_argument("--gpu-samples-per-s", type=float, default=H200_SAMPLES_PER_S,
                    help=f"one GPU's samples/s on the mlperf config (default {H200_SAMPLES_PER_S:,}, one H200)")
    ap.add_argument("--inter-link", default="ib400", help="the link between nodes, a preset or LAT_US:GBPS "
                    "(default ib400: InfiniBand NDR)")
    ap.add_argument("--device-gb", type=positive_int, default=80, help="each GPU's memory for the plan, decimal GB "
                    "(default 80)")
    ap.add_argument("--overlap", choices=("off", "on", "both"), default="off",
                    help="measure with tools/train.py --overlap-comm (on), without (off), or a row of each for W > 1 "
                    "(both; default off)")
    ap.add_argument("--no-measure", action="store_true", help="print the projection only")
    args = ap.parse_args(argv)
    for flag in ("--link", "--inter-link"):
        text = getattr(args, flag[2:].replace("-", "_"))
        try:
            link = parse_link(text, flag)
        except ValueError as e:
            ap.error(str(e))
        if link is None:
            ap.error(f"{flag} {text!r}: give a link to model (ib100, ib400, nvlink4 or LAT_US:GBPS)")
    odd = [n for n in args.gpus if n % NODE]
    if odd:
        ap.error(f"--gpus {odd[0]} is not a multiple of the node's {NODE} GPUs")
    uneven = [W for W in args.world_sizes if args.batch_size % W]
    if uneven:
        ap.error(f"--batch-size {args.batch_size} does not split over {uneven[0]} ranks; use a multiple of it")
    if args.steps < 2:
        ap.error("--steps must be at least 2: the last half is read, after the first compiles")
    if not args.no_measure and max(args.world_sizes) > 1 and mpiexec() is None:
        ap.error("no mpiexec beside python or on PATH: pip install mpich, or give --world-sizes 1")
    return args


def main(argv=None):
    args = parse(argv)
    if not args.no_measure:
        with tempfile.TemporaryDirectory(prefix="bench_scaling_") as folder:
            try:
                modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.overlap]
                rows = [measured_row(W, run_job(W, args, folder, overlap), args, overlap) for W in args.world_sizes
                        for overlap in (modes if W > 1 else (False,))]
            except RunError as e:
                print(f"bench_scaling.py: error: {e}", file=sys.stderr)
                return 1
        print_measured(rows, args)
    print_projection(args)
    return 0


if __name__ == "__main__":
    _entry.run(main)
