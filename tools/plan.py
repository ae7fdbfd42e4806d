"""Print a sharding plan: which rank holds which embedding table, each rank's memory and bytes per step, and the
step's activations on a rank.

    python tools/plan.py --preset criteo-1tb --world-size 8 --device-gb 80
    python tools/plan.py --preset criteo-1tb --world-size 8 --device-gb 10 --host-gb 200 --codec int8
    python tools/plan.py --config tables.json --world-size 4 --device-gb 40 --json plan.json
    python tools/plan.py --config tables.json --world-size 8 --local-ranks 4
    python tools/plan.py --preset criteo-kaggle --world-size 4 --device-gb 8 --link ib100 --skew 1.05 --hot-rows
    python tools/plan.py --plan plan.json --link ib400 --sample data/train --profile h200

With ``--link`` the report adds each rank's estimated step (``gpuemb.sharding.estimate``): compute on a device
``--profile``, communication over the link, both under the key skew of ``--skew`` (a Zipf exponent for every table)
or ``--sample`` (measured per table from shard rows); ``--hot-rows`` adds the step with each table's hottest rows
replicated on every rank, an estimate only (the plan does not hold them). With ``--local-ranks`` the ranks sit on
hosts of that many, and the planner may place a table table_row or grid over them (docs/sharding.md, "The
planner's 2-D choices").

A ``--config`` file is JSON: a list of tables, or ``{"tables": [...]}``, each with the fields of
``gpuemb.sharding.TableSpec`` (``name``, ``rows``, ``dim``, and optionally ``lookups_per_sample``, ``pooling``,
``dtype``, ``rule``, ``sharding``). Sizes are decimal GB. The activations are an estimate
(``gpuemb.sharding.cost.activation_bytes``, which a training run prints too): a rank's batch times the widths of a
sample's activations (the tables' rows side by side, one per lookup where a table does not pool, and the dense
layers of ``--layers``), float32, kept from the forward and matched by gradients in the backward. Exit status: 0
with a plan; 1 when no plan fits (the line says what to change); 2 on bad flags, a bad config, plan or sample file,
or a plan for another world size (one line).
"""
import argparse
import json
import math
import os
import sys

# Planning is arithmetic: it must also run on a login node without a GPU, whatever GPUEMB_DEVICE says.
os.environ["GPUEMB_DEVICE"] = "cpu"

if __name__ == "__main__":  # before the heavy imports, so that an error or a Ctrl-C while they load is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # runpy.run_path leaves tools/ off the path
    import _entry
    _entry.guard()

from gpuemb.comm.link import CHOICES as LINKS, parse_link  # noqa: E402
from gpuemb.sharding.cost import CODEC_BYTES, activation_bytes, human_bytes  # noqa: E402
from gpuemb.sharding.estimate import estimate_step  # noqa: E402
from gpuemb.sharding.hierarchical import check_hosts  # noqa: E402
from gpuemb.sharding.hot import choose_hot_rows  # noqa: E402
from gpuemb.sharding.plan import load_plan  # noqa: E402
from gpuemb.sharding.planner import PlanError, plan_tables  # noqa: E402
from gpuemb.sharding.profile import PROFILES  # noqa: E402
from gpuemb.sharding.presets import PRESETS, preset_tables  # noqa: E402
from gpuemb.sharding.report import format_report  # noqa: E402
from gpuemb.sharding.sample import sample_skews  # noqa: E402
from gpuemb.sharding.skew import KeySkew  # noqa: E402
from gpuemb.sharding.spec import RankBudget, TableSpec  # noqa: E402

DEFAULT_WORLD = 8


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"plan.py: {message}\n")


def parse_args(argv):
    p = _OneLineParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=sorted(PRESETS), help="a built-in list of tables")
    source.add_argument("--config", metavar="FILE.json", help="tables from a JSON file")
    source.add_argument("--plan", metavar="PLAN.json", help="a plan written by --json, to report and estimate "
                        "again (its tables, ranks and budgets; the planning flags do not apply)")
    p.add_argument("--world-size", type=int, help=f"ranks (default {DEFAULT_WORLD}; with --plan, checked against "
                   "the plan's)")
    p.add_argument("--local-ranks", type=int, metavar="N", help="ranks a host, a divisor of --world-size, so that the "
                   "planner may choose table_row and grid (default: all ranks on one host)")
    p.add_argument("--device-gb", type=float, default=80.0, help="device memory per rank for tables (default 80)")
    p.add_argument("--host-gb", type=float, default=0.0, help="host memory per rank for table rows (default 0)")
    p.add_argument("--ssd-gb", type=float, default=0.0, help="ssd space per rank (default 0)")
    p.add_argument("--dim", type=int, help="a preset's embedding dim (default 128)")
    p.add_argument("--dtype", help="a preset's row dtype (default float32)")
    p.add_argument("--rule", help="a preset's row update rule (default RowwiseAdagradRule)")
    p.add_argument("--batch-size", type=int, default=65536, help="samples per step over all ranks (default 65536)")
    p.add_argument("--codec", choices=sorted(CODEC_BYTES), default="fp32", help="all-to-all codec (default fp32)")
    p.add_argument("--dp-max-bytes", type=int, default=1 << 20,
                   help="tables up to this size are replicated on every rank (default 1048576)")
    p.add_argument("--cache-fraction", type=float, default=0.25,
                   help="device cache of a shard homed in host or ssd, as a share of its rows (default 0.25)")
    p.add_argument("--layers", default="", metavar="W,W,...",
                   help="the dense layers' output widths, all MLPs in order (e.g. 512,256,128,1024,1024,512,256,1), "
                        "for the activation estimate (default: the tables' rows alone)")
    p.add_argument("--json", metavar="OUT", help="also write the plan as JSON to OUT")
    est = p.add_argument_group("step-time estimate")
    est.add_argument("--link", metavar="LINK", help="estimate each rank's step over this link between ranks, as "
                     f"tools/train.py --link models it: {', '.join(LINKS)} (default: no estimate)")
    est.add_argument("--local-link", metavar="LINK",
                     help="the link between the ranks of one host, where the plan has hosts (--local-ranks, or a "
                     "--plan made with them); --link is then the link between hosts (default nvlink4, as the "
                     "planner weighs table_row and grid)")
    est.add_argument("--profile", choices=sorted(PROFILES), default="h200",
                     help="the device's gather and row-update speeds (gpuemb/sharding/profile.py; default h200)")
    skew = est.add_mutually_exclusive_group()
    skew.add_argument("--skew", type=float, metavar="ALPHA", help="the Zipf exponent of every table's keys (0: "
                      "uniform; the synthetic data's is 1.05; default: no skew, the cost model's bounds)")
    skew.add_argument("--sample", metavar="DATA", help="measure each table's key skew from HDF5 shards (a shard or "
                      "a folder), its sparse column of the table's name")
    est.add_argument("--sample-rows", type=int, default=100_000, help="rows --sample reads (default 100000)")
    est.add_argument("--hot-rows", action="store_true",
                     help="also estimate the step with each skewed table's hottest rows replicated on every rank "
                          "(HugeCTR's hybrid embedding; an estimate only, the plan does not hold them)")
    est.add_argument("--dense-bytes", type=int, default=0,
                     help="the dense layers' gradient bytes allreduced a step, for the estimate (default 0)")
    est.add_argument("--dedup-keys", action="store_true",
                     help="estimate the step of tools/train.py --dedup-keys: each rank sends a distinct single key "
                          "once to its shard (the distinct keys of its lookups under the skew; without one, at "
                          "most its lookups or the table's rows)")
    args = p.parse_args(argv)
    if args.link is not None:
        try:
            args.link = parse_link(args.link, "--link")
        except ValueError as e:
            p.error(str(e))
        if args.link is None:
            p.error("--link none gives nothing to estimate; name a link, or leave the flag out")
        try:
            args.local_link = parse_link(args.local_link or "nvlink4", "--local-link")
        except ValueError as e:
            p.error(str(e))
    elif args.skew is not None or args.sample or args.hot_rows or args.dense_bytes or args.local_link or \
            args.dedup_keys:
        p.error("--skew, --sample, --hot-rows, --dense-bytes, --local-link and --dedup-keys shape the estimate; give "
                "--link too")
    if args.skew is not None and not (args.skew >= 0 and math.isfinite(args.skew)):
        p.error(f"--skew must be a finite Zipf exponent >= 0, got {args.skew}")
    if args.sample_rows < 1 or args.dense_bytes < 0:
        p.error("--sample-rows must be at least 1 and --dense-bytes at least 0")
    if args.plan and args.world_size is None:
        args.world_size = 0  # the plan's, checked once it is read
    elif args.world_size is None:
        args.world_size = DEFAULT_WORLD
    elif args.world_size < 1:
        p.error(f"--world-size must be at least 1, got {args.world_size}")
    if args.local_ranks is not None:
        if args.plan:
            p.error("--local-ranks shapes a new plan; a --plan file keeps its own local_ranks")
        try:
            check_hosts(args.world_size, args.local_ranks, "--local-ranks")
        except ValueError as e:
            p.error(str(e))
    if not args.device_gb > 0:
        p.error(f"--device-gb must be positive, got {args.device_gb}")
    for name in ("host_gb", "ssd_gb"):
        if not getattr(args, name) >= 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if not args.preset and any(v is not None for v in (args.dim, args.dtype, args.rule)):
        p.error("--dim, --dtype and --rule shape a --preset; a --config or --plan file gives each table's own")
    try:
        args.layers = [int(w) for w in args.layers.split(",") if w.strip()]
    except ValueError:
        p.error(f"--layers {args.layers}: want widths as integers separated by commas, e.g. 512,256,1")
    if any(w < 1 for w in args.layers):
        p.error(f"--layers: every width must be at least 1, got {min(args.layers)}")
    return args


def activations_line(tables, layers, batch_size, world_size):
    """One line: the activation estimate of a rank's share of ``batch_size``, for ``tables`` and ``layers``."""
    rows = [t.dim * (1 if t.pooling else math.ceil(t.lookups_per_sample)) for t in tables]
    b = math.ceil(batch_size / world_size)
    return (f"activations per rank: {human_bytes(activation_bytes(b, rows + layers))} (a batch of {b} samples, "
            f"{sum(rows)} embedding columns, {sum(layers)} columns of {len(layers)} dense layers, float32, forward and "
            "backward)")


def load_tables(path):
    """TableSpecs from a JSON config file (see the module docstring)."""
    with open(path) as f:
        d = json.load(f)
    tables = d.get("tables") if isinstance(d, dict) else d
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError(f"{path}: want a list of tables or {{\"tables\": [...]}}, each an object with name, rows "
                         "and dim")
    try:
        return [TableSpec(**t) for t in tables]
    except TypeError as e:  # an unknown or missing field
        raise ValueError(f"{path}: {e}; a table has the fields name, rows, dim, lookups_per_sample, pooling, "
                         "dtype, rule, sharding") from e


def estimate_lines(args, plan):
    """The report's estimate: the step per rank under the skew asked for, and with hot rows if asked."""
    tables = [p.table for p in plan.placements]
    if args.sample:
        skews = sample_skews(args.sample, tables, args.sample_rows)
    elif args.skew is not None:
        skews = {t.name: KeySkew(args.skew, source="--skew") for t in tables}
    else:
        skews = {}
    profile = PROFILES[args.profile]
    # a host's own ranks talk over --local-link where the plan has hosts; estimate_step ignores it otherwise
    local = args.local_link if plan.local_ranks and plan.local_ranks < plan.world_size else None
    est = estimate_step(plan, args.link, profile, skews, dense_bytes=args.dense_bytes, local_link=local,
                        dedup=args.dedup_keys)
    hot = None
    if args.hot_rows:
        hot = estimate_step(plan, args.link, profile, skews, choose_hot_rows(plan, skews), args.dense_bytes,
                            local_link=local, dedup=args.dedup_keys)
    return est, hot


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.plan:
            plan = load_plan(args.plan, args.world_size)
            tables = [p.table for p in plan.placements]
        else:
            if args.config:
                tables = load_tables(args.config)
            else:
                shape = {k: v for k, v in (("dim", args.dim), ("dtype", args.dtype), ("rule", args.rule))
                         if v is not None}
                tables = preset_tables(args.preset, **shape)
            budget = RankBudget(int(args.device_gb * 1e9), int(args.host_gb * 1e9), int(args.ssd_gb * 1e9))
            plan = plan_tables(tables, [budget] * args.world_size, args.batch_size, args.codec, args.dp_max_bytes,
                               args.cache_fraction, args.local_ranks)
        est, hot = estimate_lines(args, plan) if args.link else (None, None)
    except PlanError as e:
        print(f"plan.py: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"plan.py: {e}", file=sys.stderr)
        return 2
    print(format_report(plan, est, hot))
    print(activations_line(tables, args.layers, plan.batch_size, plan.world_size))
    if args.json:
        try:
            with open(args.json, "w") as f:
                f.write(plan.to_json() + "\n")
        except OSError as e:
            print(f"plan.py: cannot write --json {args.json}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    _entry.run(main)
