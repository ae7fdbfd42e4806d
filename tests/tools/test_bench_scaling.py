"""tools/bench_scaling.py: the projection's arithmetic against hand-computed values, the bytes of a 2-rank job on the
wire against the cost model's plus the framing it leaves out (exactly table-wise; row-wise within 2%, the model
taking each owner's expected share of the keys), and bad flags refused in one line."""
import importlib.util
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from gpuemb.comm.link import Link

TOOLS = Path(__file__).resolve().parents[2] / "tools"
BENCH = TOOLS / "bench_scaling.py"


@pytest.fixture
def tool(monkeypatch):
    """tools/bench_scaling.py as a module (tools/ on the path, for its _scaling_projection)."""
    monkeypatch.syspath_prepend(str(TOOLS))
    spec = importlib.util.spec_from_file_location("bench_scaling", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INTRA, INTER = Link("intra", 1e-6, 1e9), Link("inter", 1e-5, 1e8)


def test_the_projection_of_two_nodes_by_hand(tool):
    from _scaling_projection import project
    p = project(16, 65536, 409_600, a2a=(1.5e6, 2), headers=(15_000, 3), allreduce=(8e6, 1), node=8, intra=INTRA,
                inter=INTER)
    assert p.compute_s == pytest.approx(4096 / 409_600)  # 0.01
    # 7 peers on the node, 8 on the other: max(7·2·1us + 1.5e6·7/15 / 1e9, 8·2·10us + 1.5e6·8/15 / 1e8)
    assert p.a2a_s == pytest.approx(max(14e-6 + 7e-4, 1.6e-4 + 8e-3))
    assert p.headers_s == pytest.approx(max(21e-6 + 7e-6, 2.4e-4 + 8e-5))
    # in the node 2·7·1us + 2·7/8·8e6 / 1e9, then between the 2 nodes 2·1·10us + 2·1/2·(8e6/8) / 1e8
    assert p.allreduce_s == pytest.approx(14e-6 + 0.014 + 2e-5 + 0.01)
    comm = 8.16e-3 + 3.2e-4 + 0.024034
    assert p.comm_s == pytest.approx(comm)
    assert p.no_overlap_s == pytest.approx(0.01 + comm) and p.overlap_s == pytest.approx(comm)


def test_one_node_uses_nvlink_alone_and_one_gpu_no_link(tool):
    from _scaling_projection import alltoall_seconds, allreduce_seconds, project
    assert alltoall_seconds(7e6, 1, 8, 8, INTRA, INTER) == pytest.approx(7e-6 + 7e6 / 1e9)
    assert allreduce_seconds(8e6, 1, 8, 8, INTRA, INTER) == pytest.approx(14e-6 + 2 * 7 / 8 * 8e6 / 1e9)
    p = project(1, 1000, 1e4, (5e6, 4), (0, 5), (8e6, 1), 8, INTRA, INTER)
    assert (p.compute_s, p.a2a_s, p.headers_s) == (0.1, 0.0, 0.0)
    assert p.overlap_s == pytest.approx(0.1)  # a GPU alone only allreduces with itself, over no peer


def test_two_ranks_send_the_cost_models_bytes_plus_the_counts(tool, tmp_path, monkeypatch):
    pytest.importorskip("mpi4py", reason="the mpi backend needs mpi4py: pip install -e '.[mpi]'")
    if tool.mpiexec() is None:
        pytest.skip("no mpiexec beside python or on PATH: pip install mpich")
    monkeypatch.setenv("GPUEMB_DEVICE", "cpu")
    for sharding in ("auto", "row"):  # the planner puts every table on one rank; row-wise splits each
        args = Namespace(embedding_dim=8, batch_size=256, steps=2, codec="fp32", sharding=sharding, link="ib400",
                         timeout_s=300)
        (tmp_path / sharding).mkdir()
        record = tool.run_job(2, args, str(tmp_path / sharding))
        wire = sum(record["comm_bytes_per_step"][t] for t in tool.EMBEDDING_TAGS)
        model, framing = tool.model_bytes(2, args)
        assert framing == 2 * 1 * 26 * 8  # one int64 count a table-stream, to the one peer, from each rank
        if sharding == "auto":
            assert wire == model + framing, (record["comm_bytes_per_step"], model)
        else:  # the model sends each owner its expected share of the keys, 1/W; the hash splits a batch near that
            assert wire == pytest.approx(model + framing, rel=0.02), (record["comm_bytes_per_step"], model)
        row = tool.measured_row(2, record, args)
        assert 0 <= row["share"] <= 1 and row["per_rank"] > 0 and row["modelled_ms"] > 0
        # blocking: every collective is waited for as it is issued, so none of the link's own time is hidden
        assert row["link_exposed"] == pytest.approx((1.0, 1.0), abs=1e-6), record["link"]
        link = record["link"]
        assert link["exposed_link_min_s"] <= link["exposed_link_max_s"] <= link["exposed_comm_s"], link
        # the exposed time, split by collective, adds up to it: blocking, the rows' all-to-all is among them
        assert sum(row["exposed_by_tag"].values()) == pytest.approx(1.0) and "a2a_fwd" in row["exposed_by_tag"]


@pytest.mark.parametrize("flags, says", [
    (["--world-sizes", "0"], "argument --world-sizes: '0' is not a positive int"),
    (["--world-sizes", "two"], "argument --world-sizes: 'two' is not a positive int"),
    (["--link", "ib50"], "--link 'ib50' is not a link; use one of none, ib100"),
    (["--link", "none"], "--link 'none': give a link to model"),
    (["--gpus", "8", "12"], "--gpus 12 is not a multiple of the node's 8 GPUs"),
    (["--batch-size", "1000", "--world-sizes", "3"], "--batch-size 1000 does not split over 3 ranks"),
], ids=["zero", "not-an-int", "unknown-link", "no-link", "gpus", "uneven"])
def test_bad_flags_are_one_line(flags, says):
    out = subprocess.run([sys.executable, str(BENCH), *flags], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out
    assert len(out.stderr.splitlines()) == 1 and says in out.stderr, out.stderr
