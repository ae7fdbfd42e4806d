"""tools/disk_probe.py on a small file: it reads, counts and refuses a block larger than the file."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
try:
    from disk_probe import main, random_read_iops
finally:
    sys.path.pop(0)

KEYS = {"iops", "MB/s", "mean_latency_us", "reads", "seconds", "queue_depth", "block_bytes"}


@pytest.fixture
def small_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * (3 << 12))  # 3 MiB
    return path


@pytest.mark.parametrize("qd", [1, 4])
def test_random_reads_are_counted(small_file, qd):
    r = random_read_iops(small_file, 4096, qd, seconds=0.2)
    assert set(r) == KEYS and r["queue_depth"] == qd and r["block_bytes"] == 4096
    assert r["reads"] > 0 and r["iops"] > 0 and r["mean_latency_us"] > 0 and r["seconds"] >= 0.2
    assert r["MB/s"] == pytest.approx(r["iops"] * 4096 / 1e6)


def test_a_block_larger_than_the_file_is_refused(small_file):
    with pytest.raises(ValueError, match=rf"{small_file} is 3145728 bytes, smaller than one block of 4194304"):
        random_read_iops(small_file, 4 << 20, 1, seconds=0.2)


def test_the_cli_prints_a_row_per_queue_depth_and_the_page_cache_note(small_file, capsys):
    assert main([str(small_file), "--block-bytes", "65536", "--qd", "1", "2", "--seconds", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "queue depth" in out and "smaller than the RAM" in out and len(out.splitlines()) == 5
