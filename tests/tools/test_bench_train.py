"""tools/bench_train.py and tools/gpu_floor.py as a user runs them (a subprocess, tiny shapes), and the floor's
arithmetic against a count by hand."""
import importlib
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
TINY = ("--cap", "2000", "--batch-size", "128", "--steps", "2", "--warmup", "1")


def tool(name, *args):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu"}
    return subprocess.run([sys.executable, str(TOOLS / name), *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_store_with_and_without_the_pipeline_prints_and_writes_its_rate(tmp_path):
    out = tool("bench_train.py", *TINY, "--no-torch", "--no-torchrec", "--json", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "t.json").read_text())
    (result,) = r["results"]
    assert result["peers"] == {} and result["cache_rows"] == int(0.1 * result["rows_in_tables"]) > 0
    assert result["ssd_host_cache_rows"] >= 2 * result["ssd_cache_rows"] > 0 and "ssd store, device" in out.stdout
    got = [(row["store"], row["pipeline"]) for row in result["rows"]]
    assert got == [(s, p) for s in ("device", "host", "ssd") for p in ("on", "off")]
    for row in result["rows"]:
        assert row["samples_per_s"] > 0 and 0 < row["loss"] < 5, row
        assert row["samples_per_s"] == pytest.approx(128e3 / row["step_ms"]), row
        assert (row["prefetched"] > 0) == (row["pipeline"] == "on"), row
        assert row["store"] == "device" or 0 <= row["hit_rate"] <= 1, row
        assert row["launches_per_step"] == {"numba": 0, "cupy": 0, "cublaslt": 0, "readbacks": 0, "by_phase": {}}
    assert out.stdout.count("launched per step: 0.0 numba kernels") == 6  # the CPU launches nothing on a device
    assert result["rows"][2]["vs_device"] == pytest.approx(
        result["rows"][2]["samples_per_s"] / result["rows"][0]["samples_per_s"])
    assert out.stdout.count("gpuemb ") == 6 and "DLRM" not in out.stdout
    # the floor: the step's matmuls alone, each row's step time over it. No time is compared with another here: the
    # floor and the steps are measured at different moments, and a busy machine can put either ahead (times belong
    # in benchmarks, not tests)
    assert 0 < result["gemm_floor_ms"], result
    for row in result["rows"]:
        assert row["vs_gemm_floor"] == pytest.approx(row["step_ms"] / result["gemm_floor_ms"])
    assert "GEMM floor" in out.stdout


def test_the_ssd_table_outgrows_its_host_cache_so_rows_come_back_from_the_file(tmp_path):
    out = tool("bench_train.py", *TINY, "--steps", "12", "--stores", "ssd", "--pipeline", "on", "--no-torch",
               "--no-torchrec", "--json", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr
    (result,) = json.loads((tmp_path / "t.json").read_text())["results"]
    (row,) = result["rows"]
    # the caches are sized on the keys the data touches, which the table holds by the end (less the last batches)
    assert result["ssd_host_cache_rows"] < row["table_keys"] <= result["touched_keys"], result
    assert "fit its host cache" not in out.stdout


def test_the_torch_peer_trains_the_same_batches_side_by_side(tmp_path):
    pytest.importorskip("torch", reason="the peer needs torch, which the test extra installs")
    out = tool("bench_train.py", *TINY, "--stores", "device", "--pipeline", "on", "--no-torchrec", "--json",
               str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr
    (result,) = json.loads((tmp_path / "t.json").read_text())["results"]
    peer, (row,) = result["peers"]["torch"], result["rows"]
    assert peer["samples_per_s"] > 0 and row["vs_torch"] == pytest.approx(row["samples_per_s"] / peer["samples_per_s"])
    # Same data, small initial rows on both sides: both near the log-loss of a 25% click rate (0.56) or log 2.
    assert 0.3 < peer["loss"] < 1.5 and 0.3 < row["loss"] < 1.5
    assert "torch DLRM" in out.stdout and "vs torch" in out.stdout


@pytest.mark.parametrize("rule", ["sgd", "rowwise_adagrad"])
def test_the_torchrec_peer_trains_the_same_batches_side_by_side(tmp_path, rule):
    pytest.importorskip("torchrec", reason="the TorchRec peer is not installed: tools/bench_train_torchrec.py says how")
    # 8 steps: TorchRec's DLRM starts from torch's default dense init, which dense Adagrad shakes for a few steps
    out = tool("bench_train.py", *TINY, "--steps", "8", "--stores", "device", "--pipeline", "on", "--optimizer", rule,
               "--json", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr
    (result,) = json.loads((tmp_path / "t.json").read_text())["results"]
    peer, (row,) = result["peers"]["torchrec"], result["rows"]
    assert row["vs_torchrec"] == pytest.approx(row["samples_per_s"] / peer["samples_per_s"])
    assert 0.3 < peer["loss"] < 1.5 and 0.3 < row["loss"] < 1.5  # the same data, both learning from log 2
    assert "TorchRec DLRM (FBGEMM TBE)" in out.stdout and "vs torchrec" in out.stdout
    # plain torch has no row-wise rule for its rows, so it sits that one out rather than train another rule
    assert ("torch" in result["peers"]) == (rule == "sgd")


def test_the_mlperf_dcnv2_config_trains_beside_its_peers(tmp_path):
    pytest.importorskip("torch", reason="the peers need torch, which the test extra installs")
    rec = importlib.util.find_spec("torchrec") is not None
    # MLPerf's whole dense model (16M weights) over tiny tables: a step at batch 64 is about a tenth of a second
    out = tool("bench_train.py", "--config", "mlperf-dcnv2", "--cap", "500", "--batch-size", "64", "--steps", "2",
               "--warmup", "1", "--stores", "device", "--pipeline", "on", "--json", str(tmp_path / "t.json"),
               *(() if rec else ("--no-torchrec",)))
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "t.json").read_text())
    (result,) = r["results"]
    assert result["config"] == "mlperf-dcnv2" and r["settings"]["batch_size"] == 64
    assert result["shape"]["cross"] == [3, 512] and sum(result["shape"]["hotness"]) == 214
    (row,) = result["rows"]
    assert row["config"] == "mlperf-dcnv2" and 0.3 < row["loss"] < 1.5  # small rows: near log 2, not 100 of them
    for who in ("torch", "torchrec") if rec else ("torch",):
        peer = result["peers"][who]
        assert peer["samples_per_s"] > 0 and 0.3 < peer["loss"] < 1.5, peer
        assert row[f"vs_{who}"] == pytest.approx(row["samples_per_s"] / peer["samples_per_s"])
    assert "3 low-rank cross layers of rank 512" in out.stdout and "214 ids a row" in out.stdout
    assert "torch DCNv2" in out.stdout and ("TorchRec DCNv2 (FBGEMM TBE)" in out.stdout) == rec
    assert "no GEMM floor" in out.stdout and "gemm_floor_ms" not in result


def _tools(*names):
    """The modules of tools/ named, imported as the tools import each other."""
    sys.path.insert(0, str(TOOLS))
    try:
        return [importlib.import_module(name) for name in names]
    finally:
        sys.path.remove(str(TOOLS))


def test_the_mlperf_dcnv2_config_runs_its_own_batch_and_steps_unless_told():
    (bench_train,) = _tools("bench_train")
    bc = bench_train.ALL_CONFIGS["mlperf-dcnv2"]
    assert (bc.batch_size, bc.steps, bc.warmup, bc.lr) == (512, 10, 3, 0.001)
    assert bench_train.CONFIGS["kaggle"].batch_size == 2048 and "mlperf-dcnv2" not in bench_train.CONFIGS  # floors
    settings = bc.model_settings()
    assert settings["model"] == "dcn" and settings["model_args"] == {
        "bottom": [512, 256, 128], "n_cross": 3, "rank": 512, "deep": [1024, 1024, 512, 256]}


def test_a_gpu_row_says_its_launches_are_not_counted_rather_than_zero(monkeypatch):
    (bench_train,) = _tools("bench_train")
    from gpuemb.autograd import backend, launches
    total = launches.COUNTS.snapshot()
    total.update(numba=0, cupy=0, cublaslt=0, readbacks=19)  # what a real GPU counts: the reads back alone
    monkeypatch.setattr(backend, "real_gpu", lambda: True)
    n = bench_train.launched_per_step(total, 10)
    assert n["readbacks"] == 1.9 and n["numba"] is None and n["cupy"] is None and n["by_phase"] is None
    row = {"store": "device", "pipeline": "on", "samples_per_s": 1e6, "step_ms": 26.9, "loss": 0.6, "hit_rate": None,
           "transfers_per_step": {"to_device": 0.6, "to_host": 1.9, "syncs": 1.9, "bytes": 1e7},
           "launches_per_step": n}
    text = bench_train.format_row(row)
    assert "launches not counted on a GPU" in text and "1.9 reads back" in text and "0.0 numba" not in text
    monkeypatch.setattr(backend, "real_gpu", lambda: False)
    assert bench_train.launched_per_step(total, 10)["numba"] == 0  # the CPU and the emulated device: counted


def _floor_module():
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location("gpu_floor", TOOLS / "gpu_floor.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


def test_the_floor_counts_row_bytes_and_mlp_flops_by_hand():
    gf = _floor_module()
    bc = gf.CONFIGS["kaggle"]  # dim 16, bottom 512-256-64, top 512-256
    # top input: 16 + 27·26/2 = 367, padded to 368.
    macs = 13 * 512 + 512 * 256 + 256 * 64 + 64 * 16 + 368 * 512 + 512 * 256 + 256 * 1
    assert gf.mlp_flops(bc, 100) == 6 * 100 * (macs + 27 * 27 * 16)
    f = gf.floor(bc, 100, unique=1000, bandwidth=1e9, flop_rate=1e12)
    assert f["row_bytes"] == 1000 * (64 + 2 * 128)  # lookup reads 16 floats; the update reads and writes 32
    assert f["memory_ms"] == pytest.approx(1e3 * f["row_bytes"] / 1e9)
    assert f["floor_ms"] == max(f["memory_ms"], f["compute_ms"]) and f["bound"] == "memory"


def test_the_gemm_floor_times_each_matmul_of_a_step_once():
    bench_train, gemm_floor = _tools("bench_train", "gemm_floor")
    bc = bench_train.CONFIGS["kaggle"]
    assert gemm_floor.mlp_layers(bc) == ([13, 512, 256, 64, 16], [368, 512, 256, 1])
    calls = []
    gemm_floor._median_ms, real = (lambda fn, repeats: calls.append(fn().shape) or 1.0), gemm_floor._median_ms
    try:
        assert gemm_floor.gemm_floor_ms(bc, 4) == len(calls) == 7 * 3 - 1  # 7 layers; no input gradient for data
    finally:
        gemm_floor._median_ms = real
    # layer 13 -> 512: forward, weight gradient (g.T @ x, the taller); 512 -> 256: forward, input, weight (x.T @ g)
    assert calls[:5] == [(4, 512), (512, 13), (4, 256), (4, 512), (512, 256)]


def test_the_floor_tool_measures_this_machine_and_reads_a_bench_result(tmp_path):
    bench = {"settings": {"batch_size": 256}, "results": [{"config": "kaggle", "rows": [
        {"store": "device", "pipeline": "off", "step_ms": 9.0},
        {"store": "device", "pipeline": "on", "step_ms": 7.0}]}]}
    (tmp_path / "b.json").write_text(json.dumps(bench))
    out = tool("gpu_floor.py", "--config", "kaggle", "--batch-size", "256", "--quick", "--measured",
               str(tmp_path / "b.json"), "--json", str(tmp_path / "f.json"))
    assert out.returncode == 0, out.stderr
    f = json.loads((tmp_path / "f.json").read_text())
    assert f["bandwidth_GB/s"] > 0.1 and f["matmul_GFLOP/s"] > 0.1 and f["measured_step_ms"] == 7.0
    assert 0 < f["unique_rows"] <= 256 * 26 and f["floor_ms"] > 0
    assert "floor:" in out.stdout and "measured 7.00 ms" in out.stdout
    # a floor for tables capped otherwise than the bench ran is not set beside it
    out = tool("gpu_floor.py", "--config", "kaggle", "--batch-size", "256", "--quick", "--cap", "1000", "--measured",
               str(tmp_path / "b.json"), "--json", str(tmp_path / "f.json"))
    assert out.returncode == 0, out.stderr
    capped = json.loads((tmp_path / "f.json").read_text())
    assert capped["cap"] == 1000 and capped["measured_step_ms"] is None and "measured" not in out.stdout
    assert capped["unique_rows"] < f["unique_rows"]  # ids folded into 1,000 rows a table repeat more
