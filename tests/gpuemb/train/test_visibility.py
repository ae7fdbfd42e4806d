"""What a run shows of itself: the train records' tables (levels, hit rates over the window, evictions), the
device caches' hit rate, the time per phase with --phase-times, the plot of them, and the memory it will take."""
import pytest

from gpuemb.autograd import backend, launches
from gpuemb.sharding.cost import activation_bytes
from gpuemb.train import Reporter, Run, TrainConfig, train
from gpuemb.train.footprint import layer_widths
from gpuemb.train.metrics_log import read_metrics
from gpuemb.train.plot import plot_metrics
from gpuemb.train.startup import startup_lines

TINY = dict(model_args={"top": [16], "bottom": [8]}, embedding_dim=4, batch_size=64, eval_rows=500, progress=False,
            steps=6, log_every=2, eval_every=6, seed=1)  # the one eval after the last train record
HOST = {"store": "host", "cache_rows": 2000}  # a cache of about two batches' keys: it misses, hits and evicts


class Counters(Reporter):
    """The counters of every level of the run's tables, read from the levels themselves at each train record."""

    def start(self, run):
        self.levels = [level for table in run.tables.values() for level in table.levels]
        self.seen = [self.read()]

    def read(self):
        return [[int(n) for n in backend.to_host(level.counters)] for level in self.levels]

    def record(self, record):
        if record["kind"] == "train":
            self.seen.append(self.read())


def run_records(tmp_path, reporter=None, **changes):
    path = tmp_path / "metrics.jsonl"
    train(TrainConfig.from_dict(TINY | {"metrics_out": str(path)} | changes), reporter)
    return [r for r in read_metrics(path) if r["kind"] == "train"]


def test_a_host_store_record_carries_its_levels_over_the_window(tmp_path):
    counters = Counters()
    records = run_records(tmp_path, counters, **HOST)
    assert len(records) == 3 and len(counters.seen) == 4
    evicted = 0
    for record, before, after in zip(records, counters.seen, counters.seen[1:]):
        (name, table), = record["tables"].items()
        assert name == "embeddings" and [lv["tier"] for lv in table["levels"]] == ["device", "host"]
        for level, (h0, m0, e0), (h, m, e) in zip(table["levels"], before, after):
            assert level["hit_rate"] == pytest.approx((h - h0) / (h - h0 + m - m0))  # the window's, not the run's
            assert 0 <= level["hit_rate"] <= 1 and level["evictions"] == e - e0 and level["bytes"] > 0
        cache, home = table["levels"]
        assert cache["rows"] <= 2000 and home["rows"] == table["keys"] and "pending" not in table
        assert record["hit_rate"] == cache["hit_rate"]  # the only device cache
        evicted += cache["evictions"]
    assert evicted > 0 and records[-1]["hit_rate"] > 0


def test_the_device_store_has_no_cache_and_an_admitting_table_says_what_is_pending(tmp_path):
    records = run_records(tmp_path, admit_after=2)
    for record in records:
        assert record["hit_rate"] is None and "phases" not in record
        table = record["tables"]["embeddings"]
        assert [lv["tier"] for lv in table["levels"]] == ["device"] and table["pending"] > 0


def test_phase_times_split_the_step(tmp_path):
    records = run_records(tmp_path, phase_times=True, **HOST)
    for record in records:
        phases = record["phases"]
        assert {"lookup", "interaction", "mlp_forward", "mlp_backward", "embedding_backward",
                "dense_optimizer"} <= phases.keys() <= set(launches.PHASES)
        assert all(seconds > 0 for seconds in phases.values()), phases
        assert sum(phases.values()) <= TINY["batch_size"] / record["samples_per_s"]  # within the step's own time


def test_the_plot_draws_the_hit_rate_and_the_phases(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the 'plot' extra)")
    records = run_records(tmp_path, phase_times=True, **HOST)
    plot_metrics(records + [{"kind": "eval", "step": 6, "auc": 0.6, "log_loss": 0.6}], tmp_path / "run.png")
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_run_says_what_its_tables_and_activations_take(tmp_path):
    run = Run(TrainConfig.from_dict(TINY | HOST))
    try:
        memory = run.memory()
        assert memory["line"] in startup_lines(run)  # the run's first lines say it
    finally:
        run.close()
    widths = [13, 26 * 4, 8, 4, 16, 1]  # dense input, 26 features of D=4 side by side, bottom to D, top, logit
    assert layer_widths(run.model) == widths
    assert memory["activations"] == activation_bytes(64, widths) == 2 * 64 * sum(widths) * 4
    assert memory["tables"]["device"] >= 2000 * run.tables["embeddings"].top.tier.spec.row_bytes
    assert memory["line"].startswith("memory: tables ") and "activations" in memory["line"]


@pytest.mark.gpu
@pytest.mark.skipif(backend.real_gpu(), reason="counts the emulated device's calls, exactly")
def test_timing_phases_adds_no_launch_or_read_to_a_step(tmp_path):
    small = dict(batch_size=8, steps=3, log_every=1, eval_every=3, eval_rows=16, **HOST)  # the simulator's time
    off, on = (run_records(tmp_path, phase_times=t, **small) for t in (False, True))
    # the first step of a process plans its matmuls' shapes (cuBLASLt), which the next run finds planned
    assert [r["launches"] for r in off[1:]] == [r["launches"] for r in on[1:]] and off[1]["launches"]["cupy"] > 0
    assert "phases" not in off[0] and on[0]["phases"]
