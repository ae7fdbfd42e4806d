"""tools/bench_store.py as a user runs it: a subprocess, what it prints, and the JSON it writes."""
import json
import os
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "bench_store.py"


def bench(*args):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu"}
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, capture_output=True, text=True, timeout=600)


def test_quick_run_prints_every_table_with_sane_numbers(tmp_path):
    out = bench("--quick", "--json", str(tmp_path / "store.json"), "--ssd-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    for title in ("lookup + update", "hit rate of the device cache", "overhead per key"):
        assert title in out.stdout, out.stdout
    assert sorted(os.listdir(tmp_path)) == ["store.json"]  # the ssd tables' files were removed
    r = json.loads((tmp_path / "store.json").read_text())
    configs = r["configs"]
    assert [c["config"] for c in configs][0] == "device" and len(configs) == 4
    for c in configs:
        assert c["rows/s"] > 0 and c["keys/s"] >= c["rows/s"] and c["GB/s"] > 0, c
        rates = [float(h) for h in c["hit rates"].split(" / ")]
        assert all(0 <= h <= 1 for h in rates), c
    assert 0 < configs[0]["% of copy"] < 100
    for policy in ("lru", "lfu"):
        hits = [row[policy] for row in r["hit_rate"]]
        assert all(0 <= h <= 1 for h in hits) and hits == sorted(hits) and hits[-1] > hits[0], hits
    sizes = [row["keys"] for row in r["overhead"]]
    assert sizes == sorted(sizes) and len(sizes) >= 3
    for row in r["overhead"]:
        assert 0 < row["index B/key"] and 0 < row["allocator B/key"], row
        assert row["all overhead B/key"] > row["index+allocator B/key"], row


def test_beyond_ram_on_a_small_table_compares_probes_and_cleans_up(tmp_path):
    out = bench("--beyond-ram", "--ssd-dir", str(tmp_path), "--ssd-gb", "0.005", "--steps", "20", "--batch", "256",
                "--cache-rows", "2048", "--host-cache-rows", "8192", "--probe-seconds", "0.1", "--json",
                str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert "peak RSS" in out.stdout and "within" in out.stdout, out.stdout
    assert "disk probe" in out.stdout and "targets:" in out.stdout and "overlap on" in out.stdout, out.stdout
    r = json.loads((tmp_path / "r.json").read_text())["beyond_ram"]
    assert r["rows"] == int(0.005e9 // 260) and r["file_bytes"] >= r["rows"] * 260
    ssd, host, device = r["tables"]
    assert ssd["keys"] == r["rows"] and host["keys"] == device["keys"] == r["touched_keys"] < r["rows"]
    assert ssd["ssd / this"] == 1 and all(t["rows/s"] > 0 and t["steps/s"] > 0 for t in r["tables"])
    assert r["ssd_vs_host_steps"] == ssd["steps/s"] / host["steps/s"] and r["overlap"] is True
    assert r["probe_note"] and "smaller than the RAM" in r["probe_note"]  # a small file: the page cache answers
    for qd in (1, 16):
        p = r["probe"][f"qd{qd}"]
        assert p["queue_depth"] == qd and p["block_bytes"] == 64 * 260 and p["reads"] > 0 and p["iops"] > 0, p
    io = r["chunk_io"]
    assert {"chunks_read", "chunks_written", "io_seconds", "chunks/s", "% of qd16", "chunks/step"} <= set(io)
    if io["chunks/s"] is not None:  # once the tier counts its chunk I/O
        assert io["% of qd16"] == 100 * io["chunks/s"] / r["probe"]["qd16"]["iops"]
    assert set(r["targets"]) == {"ssd_vs_host", "chunk_pct_of_qd16", "rss_within_bound"}
    assert r["targets"]["rss_within_bound"] is True and r["targets"]["ssd_vs_host"] == (r["ssd_vs_host_steps"] >= 0.5)
    assert sorted(os.listdir(tmp_path)) == ["r.json"]  # the table's file is deleted without --keep


def test_beyond_ram_refuses_when_the_disk_is_short(tmp_path):
    out = bench("--beyond-ram", "--ssd-dir", str(tmp_path), "--ssd-gb", "1e9")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "GB free, the table needs" in out.stderr and "lower --ssd-gb" in out.stderr
    assert os.listdir(tmp_path) == []


def test_beyond_ram_needs_a_folder():
    out = bench("--beyond-ram")
    assert out.returncode == 2 and "--beyond-ram needs --ssd-dir DIR" in out.stderr
