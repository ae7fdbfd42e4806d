"""The modelled link (link.py) and what each collective puts on it (traffic.py): the alpha-beta time, the presets,
a bad name in one line, and the messages and bytes of each algorithm for 1 to 4 ranks."""
import pytest

from gpuemb import comm
from gpuemb.comm import traffic
from gpuemb.comm.link import PRESETS, Link, link_from_env, parse_link


def test_a_link_takes_latency_per_message_and_bytes_over_bandwidth():
    link = Link("test", 2e-6, 1e9)
    assert link.seconds(3, 5000) == 3 * 2e-6 + 5000 / 1e9
    assert link.seconds(0, 0) == 0


def test_the_presets_are_the_data_sheets_figures():
    assert PRESETS["ib100"] == Link("ib100", 0.6e-6, 100e9 / 8)  # 100 Gb/s a direction
    assert PRESETS["ib400"] == Link("ib400", 0.6e-6, 400e9 / 8)
    assert PRESETS["nvlink4"] == Link("nvlink4", 2e-6, 900e9 / 2)  # 900 GB/s is both directions together


def test_a_link_is_named_by_preset_or_by_latency_and_bandwidth(monkeypatch):
    assert parse_link("nvlink4") is PRESETS["nvlink4"]
    assert parse_link("1.5:25") == Link("1.5:25", 1.5e-6, 25e9)
    assert parse_link("none") is None and parse_link(None) is None
    monkeypatch.setenv(comm.LINK_ENV, "ib400")
    assert link_from_env() is PRESETS["ib400"]


@pytest.mark.parametrize("text", ["ib50", "fast", "1.5", "1.5:0", "-1:25", "1:nan", "1:2:3"])
def test_a_link_that_does_not_exist_is_one_line_naming_the_presets(text, monkeypatch):
    with pytest.raises(ValueError) as e:
        parse_link(text, "--link")
    assert str(e.value) == (f"--link {text!r} is not a link; use one of none, ib100, ib400, nvlink4, LAT_US:GBPS "
                            "(latency in microseconds, bandwidth in GB/s each way, e.g. 1.5:25)")
    monkeypatch.setenv(comm.LINK_ENV, text)
    with pytest.raises(ValueError, match=r"^\$GPUEMB_COMM_LINK .* is not a link; use one of none, ib100"):
        comm.init("local")


def test_a_link_checks_itself():
    with pytest.raises(ValueError, match="link x: bandwidth 0 B/s; use a finite number > 0"):
        Link("x", 1e-6, 0)


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_each_algorithm_puts_its_messages_and_bytes_on_the_link(W):
    n, h = 4000, (8 + W) * 8  # an array of n bytes; the header of W + 8 int64
    assert traffic.header_traffic(W) == (W - 1, (W - 1) * h)
    assert traffic.allreduce(W, n) == (2 * (W - 1), 2 * (W - 1) * n // W)
    assert traffic.reduce_scatter(W, n) == (W - 1, (W - 1) * n // W)
    assert traffic.allgather(W, (W - 1) * n) == (W - 1, (W - 1) * n)
    assert traffic.alltoallv(W, 300, 700) == (W - 1, 700)  # full duplex: the larger direction
    assert traffic.broadcast(W, n) == {1: (0, 0), 2: (1, n), 3: (2, 2 * n), 4: (2, 2 * n)}[W]
    assert traffic.barrier(W) == (0, 0)
    assert traffic.with_header(W, (5, 100)) == (5 + W - 1, 100 + (W - 1) * h)
