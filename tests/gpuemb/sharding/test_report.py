"""The report: the imbalance ratio, and a per-rank table whose numbers are the cost model's."""
import re

import pytest

from gpuemb.sharding.cost import rank_costs
from gpuemb.sharding.planner import plan_tables
from gpuemb.sharding.report import format_report, imbalance
from gpuemb.sharding.spec import RankBudget, TableSpec


def test_imbalance_is_max_over_mean(rng):
    assert imbalance([1, 2, 3]) == 1.5
    assert imbalance([4, 4]) == 1.0 and imbalance([0, 0, 0]) == 1.0
    v = rng.uniform(1, 10, 7)
    assert imbalance(iter(v)) == pytest.approx(v.max() / v.mean())


def test_report_shows_each_rank_and_table():
    tables = [TableSpec("user", 3_000_000, 64), TableSpec("item", 200_000, 64, pooling="mean"),
              TableSpec("wide", 5_000, 512), TableSpec("tiny", 30, 16)]
    plan = plan_tables(tables, [RankBudget(500_000_000, 4 * 10 ** 9)] * 3, batch_size=3000, codec="int8")
    text = format_report(plan)
    costs = rank_costs(plan)
    assert text.startswith("sharding plan: 4 tables on 3 ranks, batch 3000 (1000 a rank), codec int8")
    ranks = re.findall(r"^(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +(\d+) +([\d.]+) +([\d.]+) +"
                       r"([\d.]+) +([\d.]+) +([\d.]+)$", text, re.M)
    assert [int(r[0]) for r in ranks] == [0, 1, 2]
    for row, c in zip(ranks, costs):
        assert float(row[1]) == pytest.approx(c.memory.device / 1e9, abs=0.006)
        assert float(row[3]) == pytest.approx(c.memory.host / 1e9, abs=0.006)
        assert int(row[6]) == c.shards and float(row[11]) == pytest.approx(c.load / 1e6, abs=0.06)
    ratio = re.search(r"imbalance \(max/mean\): load ([\d.]+), device memory ([\d.]+)", text)
    assert float(ratio[1]) == pytest.approx(imbalance(c.load for c in costs), abs=0.006)
    assert float(ratio[2]) == pytest.approx(imbalance(c.memory.device for c in costs), abs=0.006)
    for p in plan.placements:
        assert re.search(rf"^{p.table.name} +{p.table.rows} +{p.table.dim} +{p.kind} ", text, re.M)
        assert p.reason in text


def test_report_adds_the_estimate_and_hot_rows():
    from gpuemb.comm.link import PRESETS
    from gpuemb.sharding.estimate import estimate_step
    from gpuemb.sharding.hot import choose_hot_rows
    from gpuemb.sharding.profile import PROFILES
    from gpuemb.sharding.skew import KeySkew
    plan = plan_tables([TableSpec("user", 3_000_000, 64), TableSpec("item", 200_000, 64)],
                       [RankBudget(2 * 10 ** 9)] * 2, batch_size=4096)
    skews = {"user": KeySkew(1.05), "item": KeySkew(1.05)}
    est = estimate_step(plan, PRESETS["ib100"], PROFILES["h200"], skews)
    with_hot = estimate_step(plan, PRESETS["ib100"], PROFILES["h200"], skews, choose_hot_rows(plan, skews))
    text = format_report(plan, est, with_hot)
    assert "estimated step over ib100 on h200 (key skew of 2 of 2 tables: Zipf alpha 1.05, given):" in text
    rows = re.findall(r"^(\d) +([\d.]+) +([\d.]+) +([\d.]+) +[\d.]+ +[\d.]+ +[\d.]+ +\d+$", text, re.M)
    assert [int(r[0]) for r in rows] == [0, 1]
    for (_, compute, comm, total), r in zip(rows, est.ranks):
        assert (float(compute), float(comm), float(total)) == pytest.approx(
            (r.compute_s * 1e3, r.comm_s * 1e3, r.total_s * 1e3), abs=6e-4)
    assert f"imbalance (max/mean) of the ranks' time {est.imbalance:.2f}" in text
    sent = dict(re.findall(r"(\w+) ([\d,]+) B", text.split("2 ranks send per step (as tools/train.py")[1]
                           .split("\n")[0]))
    for tag in ("a2a_keys", "a2a_fwd", "a2a_bwd", "loss"):  # both ranks' sends, summed, as train.py's last line
        assert int(sent[tag].replace(",", "")) == round(sum(r.sent[tag] for r in est.ranks)) > 0, (tag, sent)
    assert "hot rows replicated on every rank (estimated only" in text and re.search(r"^user +\d+ +0\.\d{3} ", text,
                                                                                      re.M)
