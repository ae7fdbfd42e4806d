"""A plan as a person reads it: per rank, memory per tier and bytes per step; per table, where it went and why.

Load is ``RankCost.load``, the bytes a rank moves per step (store lookups and the bytes it sends); the imbalance
ratio is max / mean over ranks, 1.0 when perfectly balanced. Memory is in decimal GB, traffic in MB per step.
Given a ``StepEstimate`` (``estimate.py``), the report adds each rank's estimated step in ms (compute,
communication, total) and its imbalance; given one with hot rows replicated too, the hot sets and that step beside.
"""
from .cost import rank_costs


def imbalance(values):
    """max / mean of ``values``: 1.0 is perfect balance (all zeros counts as balanced)."""
    values = list(values)
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


def _table(header, rows, left=(0,)):
    """Rows of cells as aligned text: columns ``left`` left-aligned (names, words), the rest right-aligned."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def _ranks_of(p):
    ranks = sorted(s.rank for s in p.shards)
    return "all" if p.kind in ("row", "data") else ",".join(map(str, ranks))


def rank_rows(plan):
    """One row per rank: memory per tier (GB), shards, and bytes per step (MB)."""
    rows = []
    for r, (c, b) in enumerate(zip(rank_costs(plan), plan.budgets)):
        m = c.memory
        rows.append([r, f"{m.device / 1e9:.2f}", f"{b.device_bytes / 1e9:.2f}", f"{m.host / 1e9:.2f}",
                     f"{m.ssd / 1e9:.2f}", f"{m.host_meta / 1e9:.2f}", c.shards, f"{c.lookup / 1e6:.1f}",
                     f"{c.a2a_fwd / 1e6:.1f}", f"{c.a2a_bwd / 1e6:.1f}", f"{c.allreduce / 1e6:.1f}",
                     f"{c.load / 1e6:.1f}"])
    return rows


def _ms(seconds):
    return f"{seconds * 1e3:.3f}"


def estimate_lines(est, title):
    """The lines of a ``StepEstimate``: per rank, compute, communication and total ms, and what they come from."""
    lines = [title, "per rank: ms a step; bytes in MB"]
    lines += _table(["rank", "compute", "comm", "total", "gathered", "updated", "on link", "messages"],
                    [[r, _ms(t.compute_s), _ms(t.comm_s), _ms(t.total_s), f"{t.gather_bytes / 1e6:.1f}",
                      f"{t.update_bytes / 1e6:.1f}", f"{t.link_bytes / 1e6:.2f}", t.messages]
                     for r, t in enumerate(est.ranks)])
    sent = {}
    for t in est.ranks:
        for tag, n in t.sent.items():
            sent[tag] = sent.get(tag, 0) + n
    return lines + [f"step {_ms(est.step_s)} ms (the slowest rank); imbalance (max/mean) of the ranks' time "
                    f"{est.imbalance:.2f}",
                    f"{len(est.ranks)} ranks send per step (as tools/train.py's last line counts them): " +
                    ", ".join(f"{tag} {round(n):,} B" for tag, n in sent.items() if n)]


def hot_lines(hot, est):
    """The hot sets replicated in ``est`` (``{table: HotRows}``), one line a table, and a summary."""
    if not hot:
        return ["hot rows: none worth replicating (no table's rows are looked up often enough, or no device "
                "memory is left on some rank)"]
    lines = _table(["table", "hot rows", "share", "memory MB", "allreduce MB"],
                   [[h.table, h.rows, f"{h.share:.3f}", f"{h.memory / 1e6:.2f}", f"{h.allreduce / 1e6:.3f}"]
                    for h in hot.values()])
    return lines + [f"with these hot rows replicated: step {_ms(est.step_s)} ms, imbalance {est.imbalance:.2f}"]


def format_report(plan, estimate=None, hot_estimate=None):
    """The plan as text: a table per rank, the imbalance ratios, and a line per table; with ``estimate`` (a
    ``StepEstimate``), each rank's estimated step; with ``hot_estimate`` (one with hot rows), the hot sets."""
    costs = rank_costs(plan)
    W, B = plan.world_size, plan.batch_size
    lines = [f"sharding plan: {len(plan.placements)} tables on {W} ranks, batch {B} ({B / W:g} a rank), "
             f"codec {plan.codec}", "", "per rank: memory in GB, bytes per step in MB"]
    lines += _table(["rank", "device", "of", "host", "ssd", "host meta", "shards", "lookup", "a2a fwd", "a2a bwd",
                     "allreduce", "load"], rank_rows(plan))
    lines += ["", f"imbalance (max/mean): load {imbalance(c.load for c in costs):.2f}, "
                  f"device memory {imbalance(c.memory.device for c in costs):.2f}", "", "tables:"]
    lines += _table(["table", "rows", "dim", "kind", "ranks", "home", "cache rows", "reason"],
                    [[p.table.name, p.table.rows, p.table.dim, p.kind, _ranks_of(p),
                      "+".join(sorted({s.home for s in p.shards})),
                      sum(s.cache_rows for s in p.shards) or "-", p.reason] for p in plan.placements],
                    left=(0, 3, 4, 5, 7))
    if estimate is not None:
        within = f" between hosts, {estimate.local_link.name} within one," if estimate.local_link else ""
        dedup = ", keys deduplicated a rank" if estimate.dedup else ""
        lines += [""] + estimate_lines(estimate, f"estimated step over {estimate.link.name}{within} on "
                                                 f"{estimate.profile.name} ({_skew_words(estimate)}{dedup}):")
    if hot_estimate is not None:
        lines += ["", "hot rows replicated on every rank (estimated only: the plan and the runtime do not hold "
                      "them):"] + hot_lines(hot_estimate.hot, hot_estimate)
    return "\n".join(lines)


def _skew_words(est):
    return est.skew_note or "no key skew given"
