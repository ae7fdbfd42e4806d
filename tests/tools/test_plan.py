"""tools/plan.py as a user runs it: exit codes, one-line errors, the report, the JSON and a config file."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest

from gpuemb.sharding.plan import Plan
from gpuemb.sharding.planner import plan_tables
from gpuemb.sharding.spec import RankBudget, TableSpec

PLAN = pathlib.Path(__file__).resolve().parents[2] / "tools" / "plan.py"


def run(*args):
    return subprocess.run([sys.executable, str(PLAN), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tool():
    """The script as a module, for the cases that need no subprocess; it sets GPUEMB_DEVICE, so that is undone."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUEMB_DEVICE", "auto")
        spec = importlib.util.spec_from_file_location("plan_tool", PLAN)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


def test_criteo_1tb_on_8_ranks_of_80gb(tmp_path):
    out = run("--preset", "criteo-1tb", "--world-size", "8", "--device-gb", "80", "--codec", "int8",
              "--json", str(tmp_path / "plan.json"))
    assert out.returncode == 0, out.stderr
    assert re.findall(r"^(\d) +[\d.]+ +80.00 ", out.stdout, re.M) == [str(r) for r in range(8)]
    assert len(re.findall(r"^C\d+ ", out.stdout, re.M)) == 26 and "imbalance (max/mean): load" in out.stdout
    plan = Plan.from_json((tmp_path / "plan.json").read_text())
    assert plan.world_size == 8 and plan.codec == "int8" and plan.placement("C20").table.rows == 48937457


def test_bad_input_is_one_line_and_exit_2():
    out = run("--preset", "criteo-1tb", "--world-size", "0")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "plan.py: --world-size must be at least 1, got 0\n"


def test_no_fit_is_one_line_and_exit_1():
    out = run("--preset", "criteo-1tb", "--device-gb", "5")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1
    assert "cannot place table 'C1'" in out.stderr and "a host or ssd tier" in out.stderr


@pytest.mark.parametrize("args,message", [
    ([], "one of the arguments --preset --config --plan is required"),
    (["--preset", "avazu"], "invalid choice: 'avazu'"),
    (["--preset", "criteo-1tb", "--config", "t.json"], "not allowed with argument"),
    (["--preset", "criteo-1tb", "--device-gb", "-1"], "--device-gb must be positive, got -1.0"),
    (["--preset", "criteo-1tb", "--host-gb", "nan"], "--host-gb must be >= 0, got nan"),
    (["--preset", "criteo-1tb", "--codec", "fp8"], "invalid choice: 'fp8'"),
    (["--preset", "criteo-1tb", "--dim", "0"], "TableSpec('C1'): dim=0; use an int >= 1"),
    (["--preset", "criteo-1tb", "--batch-size", "4"], "batch_size=4; use an int >= the 8 ranks"),
    (["--config", "t.json", "--dim", "64"], "--dim, --dtype and --rule shape a --preset"),
    (["--config", "missing.json"], "No such file or directory: 'missing.json'"),
    (["--preset", "criteo-1tb", "--link", "ib50"], "--link 'ib50' is not a link; use one of none, ib100"),
    (["--preset", "criteo-1tb", "--skew", "1.05"], "give --link too"),
    (["--preset", "criteo-1tb", "--dedup-keys"], "give --link too"),
    (["--preset", "criteo-1tb", "--link", "ib100", "--skew", "-1"], "--skew must be a finite Zipf exponent"),
    (["--preset", "criteo-1tb", "--link", "ib100", "--profile", "a100"], "invalid choice: 'a100'"),
    (["--preset", "criteo-1tb", "--link", "ib100", "--skew", "1", "--sample", "d"], "not allowed with argument"),
])
def test_bad_flags(tool, capsys, args, message):
    try:
        code = tool.main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("plan.py: ")
    assert message in err


def test_config_file(tool, capsys, tmp_path):
    tables = [{"name": "user", "rows": 2_000_000, "dim": 32, "pooling": "mean"},
              {"name": "item", "rows": 30_000, "dim": 32, "lookups_per_sample": 5.0, "rule": "AdamRule"}]
    (tmp_path / "t.json").write_text(json.dumps({"tables": tables}))
    assert tool.main(["--config", str(tmp_path / "t.json"), "--world-size", "2", "--device-gb", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^user +2000000 +32 +table ", out, re.M) and re.search(r"^item +30000 ", out, re.M)
    (tmp_path / "bad.json").write_text(json.dumps([{"name": "user", "rows": 10, "dims": 32}]))
    assert tool.main(["--config", str(tmp_path / "bad.json")]) == 2
    assert "unexpected keyword argument 'dims'" in capsys.readouterr().err
    (tmp_path / "odd.json").write_text("[1, 2]")
    assert tool.main(["--config", str(tmp_path / "odd.json")]) == 2
    assert "want a list of tables" in capsys.readouterr().err


def test_the_activations_are_the_estimate_of_a_rank_s_batch(tool, capsys, tmp_path):
    tables = [{"name": "user", "rows": 1000, "dim": 4}, {"name": "tags", "rows": 50, "dim": 8,
                                                          "lookups_per_sample": 2.5, "pooling": None}]
    (tmp_path / "t.json").write_text(json.dumps(tables))
    args = ["--config", str(tmp_path / "t.json"), "--world-size", "2", "--device-gb", "1", "--batch-size", "100"]
    assert tool.main(args + ["--layers", "8,4,1"]) == 0
    widths = 4 + 8 * 3 + 8 + 4 + 1  # a pooled row, an unpooled table's 3 rows (2.5 lookups, rounded up), the layers
    want = 2 * 50 * widths * 4  # forward and backward, 50 samples a rank, float32
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith(f"activations per rank: {tool.human_bytes(want)} (a batch of 50 samples, 28 embedding "
                           "columns, 13 columns of 3 dense layers")
    with pytest.raises(SystemExit) as bad:
        tool.main(args + ["--layers", "8,x"])
    assert bad.value.code == 2 and "--layers 8,x: want widths as integers" in capsys.readouterr().err


def test_estimate_columns_and_hot_rows(tool, capsys):
    args = ["--preset", "criteo-kaggle", "--world-size", "2", "--device-gb", "16", "--link", "ib100", "--skew",
            "1.05", "--hot-rows"]
    assert tool.main(args) == 0
    out = capsys.readouterr().out
    assert "estimated step over ib100 on h200 (key skew of 26 of 26 tables: Zipf alpha 1.05, --skew):" in out
    assert re.search(r"^rank +compute +comm +total +gathered +updated +on link +messages$", out, re.M)
    assert len(re.findall(r"^[01] +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +\d+$", out, re.M)) == 2
    assert "imbalance (max/mean) of the ranks' time" in out and "estimated only" in out
    assert re.search(r"^C3 +\d+ +0\.\d+ ", out, re.M) and "with these hot rows replicated: step" in out


def test_dedup_keys_estimates_fewer_bytes_on_the_link_under_skew(tool, capsys):
    args = ["--preset", "criteo-kaggle", "--world-size", "2", "--device-gb", "16", "--link", "ib100", "--skew",
            "1.05", "--batch-size", "8192"]
    sent = {}
    for extra in ([], ["--dedup-keys"]):
        assert tool.main(args + extra) == 0
        out = capsys.readouterr().out
        assert ("keys deduplicated a rank" in out) == bool(extra)
        sent[bool(extra)] = int(re.search(r"^2 ranks send per step .*?: a2a_keys ([\d,]+) B", out, re.M)[1]
                                .replace(",", ""))
    assert sent[True] < sent[False] / 2, sent  # Criteo's smaller tables repeat their keys within a rank's 4096


def test_a_saved_plan_for_another_world_is_one_line(tool, capsys, tmp_path):
    path = tmp_path / "plan.json"
    assert tool.main(["--preset", "criteo-kaggle", "--world-size", "2", "--device-gb", "16", "--json",
                      str(path)]) == 0
    capsys.readouterr()
    assert tool.main(["--plan", str(path), "--link", "nvlink4"]) == 0
    assert "estimated step over nvlink4" in capsys.readouterr().out
    assert tool.main(["--plan", str(path), "--world-size", "4"]) == 2
    err = capsys.readouterr().err
    assert err == f"plan.py: --plan {path} is for 2 ranks, not --world-size 4; plan again for the world you run in\n"


def test_a_saved_plan_over_hosts_shows_its_grid_table(tool, capsys, tmp_path):
    # a plan made over 2 hosts of 4 ranks by the API, saved, is reported with its grid
    plan = plan_tables([TableSpec("w", 100_000, 1024)], [RankBudget(80 * 10 ** 9)] * 8, local_ranks=4)
    (tmp_path / "plan.json").write_text(plan.to_json())
    assert tool.main(["--plan", str(tmp_path / "plan.json"), "--link", "ib100"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^w +100000 +1024 +grid +0,1,2,3,4,5,6,7 +device +- +2 column ranges over the hosts", out, re.M)
    assert plan.placement("w").reason in out and "estimated step over ib100" in out


def test_local_ranks_lets_the_planner_choose_grid(tool, capsys, tmp_path):
    # test_planner_grid.py's wide table: column-wise on one host, grid over 2 hosts of 4 ranks
    (tmp_path / "t.json").write_text(json.dumps([{"name": "w", "rows": 100_000, "dim": 1024}]))
    args = ["--config", str(tmp_path / "t.json"), "--world-size", "8", "--json", str(tmp_path / "plan.json")]
    assert tool.main(args) == 0
    assert re.search(r"^w +100000 +1024 +column ", capsys.readouterr().out, re.M)
    assert tool.main(args + ["--local-ranks", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^w +100000 +1024 +grid +0,1,2,3,4,5,6,7 +device +- +2 column ranges over the hosts, each "
                     r"row-wise over its 4 ranks: dim 1024 >= 512 with few rows, and a step is estimated", out, re.M)
    assert Plan.from_json((tmp_path / "plan.json").read_text()).local_ranks == 4


@pytest.mark.parametrize("value,message", [
    ("3", "--local-ranks: 3 ranks a host do not divide the 8 ranks; give the ranks of one host, a divisor of 8"),
    ("0", "--local-ranks: 0 ranks a host do not divide the 8 ranks"),
    ("x", "argument --local-ranks: invalid int value: 'x'"),
])
def test_a_bad_local_ranks_is_one_line_and_exit_2(tmp_path, value, message):
    out = run("--preset", "criteo-kaggle", "--local-ranks", value, "--json", str(tmp_path / "plan.json"))
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "plan.json").exists()
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("plan.py: ") and message in out.stderr


def test_local_ranks_with_a_saved_plan_is_one_line(tool, capsys, tmp_path):
    with pytest.raises(SystemExit) as bad:
        tool.main(["--plan", str(tmp_path / "plan.json"), "--local-ranks", "2"])
    assert bad.value.code == 2
    err = capsys.readouterr().err
    assert err == "plan.py: --local-ranks shapes a new plan; a --plan file keeps its own local_ranks\n"


def test_a_plan_over_hosts_is_estimated_with_its_hosts_own_link(tool, capsys, tmp_path):
    """A grid plan's all-to-alls within a host go over --local-link (NVLink by default), between hosts over --link,
    and the report names both. Each rank also sends to the other host, so the slower link sets its exchange: a
    host's own link shows in the step where it is the slower one."""
    plan = plan_tables([TableSpec("w", 100_000, 1024)], [RankBudget(80 * 10 ** 9)] * 8, local_ranks=4)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert tool.main(["--plan", str(path), "--link", "ib100"]) == 0
    out = capsys.readouterr().out
    assert "estimated step over ib100 between hosts, nvlink4 within one, on h200" in out
    args = tool.parse_args(["--plan", str(path), "--link", "ib100"])
    fast, _ = tool.estimate_lines(args, tool.load_plan(str(path), None))
    args = tool.parse_args(["--plan", str(path), "--link", "ib100", "--local-link", "1000:0.1"])
    slow, _ = tool.estimate_lines(args, tool.load_plan(str(path), None))
    assert fast.local_link.name == "nvlink4" and slow.local_link.name == "1000:0.1"
    assert fast.step_s < slow.step_s


def test_a_bad_local_link_is_one_line_and_exit_2(tmp_path):
    out = run("--preset", "criteo-kaggle", "--link", "ib100", "--local-link", "ib7")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert "--local-link 'ib7' is not a link" in out.stderr
    out = run("--preset", "criteo-kaggle", "--local-link", "ib100")  # nothing to estimate: not silently ignored
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "give --link too" in out.stderr
