"""tools/train.py --plan: a run on the plan that tools/plan.py --json wrote, on one rank or two; a bad plan file
refused in one line that names it; a checkpoint of such a run resumed on the plan and in another world."""
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuemb import models
from gpuemb.optim import RULES
from gpuemb.store.options import TableConfig
from gpuemb.train import ConfigError, TrainConfig
from gpuemb.train.cli import main as train_main
from gpuemb.train.cluster import Cluster

ROOT = Path(__file__).resolve().parents[3]
TRAIN, PLAN = ROOT / "tools" / "train.py", ROOT / "tools" / "plan.py"
BASE = ["--tables", "per-feature", "--embedding-dim", "8", "--batch-size", "32", "--train-rows", "512",
        "--eval-rows", "64", "--steps", "2", "--log-every", "1", "--no-progress"]
TINY = [*BASE, "--model-arg", "bottom=[16]", "--model-arg", "top=[16,8]"]
FEATURES = [f"C{i}" for i in range(1, 27)]  # the synthetic data's sparse columns, a table each


def make_plan(folder, name, tables, world_size):
    """The plan tools/plan.py --json writes for ``tables`` (dicts of TableSpec fields) on ``world_size`` ranks."""
    (folder / f"{name}.tables.json").write_text(json.dumps(tables))
    path = folder / f"{name}.json"
    done = subprocess.run([sys.executable, PLAN, "--config", folder / f"{name}.tables.json", "--world-size",
                           str(world_size), "--device-gb", "1", "--batch-size", "32", "--json", path],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """``{W: path}``: plans of the per-feature tables on 1 and 2 ranks, C2, C4, ... asked column-wise and the
    others table-wise."""
    folder = tmp_path_factory.mktemp("plans")
    tables = [{"name": n, "rows": 1000, "dim": 8, "sharding": ("table", "column")[i % 2]}
              for i, n in enumerate(FEATURES)]
    return {W: make_plan(folder, f"plan{W}", tables, W) for W in (1, 2)}


def losses(path, kind="train"):
    return {r["step"]: r["loss" if kind == "train" else "log_loss"]
            for r in map(json.loads, Path(path).read_text().splitlines()) if r["kind"] == kind}


def test_a_one_process_run_shards_by_a_plan_for_one_rank_and_trains_as_whole_tables_do(plans, tmp_path):
    assert train_main([*TINY, "--metrics-out", str(tmp_path / "whole.jsonl")]) == 0
    assert train_main([*TINY, "--plan", str(plans[1]), "--checkpoint-dir", str(tmp_path / "ckpt"), "--metrics-out",
                       str(tmp_path / "plan.jsonl")]) == 0
    # sharded by the plan: a world of one keeps its tables whole, in embeddings.h5, otherwise
    assert (tmp_path / "ckpt" / "step-000000002" / "embeddings.rank0-of-1.h5").is_file()
    whole, planned = losses(tmp_path / "whole.jsonl"), losses(tmp_path / "plan.jsonl")
    assert len(whole) == 2 and planned == pytest.approx(whole, rel=1e-6)


def _set(field, value, table=0, shard=0):
    """A change to a plan's JSON: ``field`` of shard ``shard`` of table ``table`` set to ``value``."""
    def change(d):
        d["placements"][table]["shards"][shard][field] = value
    return change


def _rename(d):
    d["placements"] = d["placements"][1:]
    d["placements"][0]["table"]["name"] = "X"


def _widen(d):
    d["placements"][0]["table"]["dim"] = 16
    for s in d["placements"][0]["shards"]:
        s["cols"] = [0, 16]


# (what the file holds: text, bytes, a change to the 1-rank plan's JSON, or "2 ranks"; what the line says)
BAD = {
    "missing": (None, "cannot read it (No such file or directory); write one with tools/plan.py --json"),
    "a folder": ("folder", "cannot read it (Is a directory)"),
    "not JSON": ('{"budgets": [', "Plan.from_json: not JSON (JSONDecodeError"),
    "nested past the parser": ("[" * 100_000, "not JSON (RecursionError"),
    "not text": (b"\xff\xfe{}", "not text (invalid start byte at byte 0); give the JSON that tools/plan.py"),
    "a list": ("[1, 2]", "Plan.from_json: not a plan (TypeError"),
    "a number of 5000 digits": ('{"budgets": [' + "9" * 5000 + "]}", "not JSON (ValueError: Exceeds the limit"),
    "a negative rank": (_set("rank", -1), "Shard(rank=-1, rows=1000, cols=(0, 8)"),
    "a rank of 400 digits": (_set("rank", 10 ** 400), "Shard(rank=100000000000000000...0000000000000000000, rows=1000"),
    "a rank outside the world": (_set("rank", 1), "needs a rank in [0, 1)"),
    "a rank as text": (_set("rank", "0"), "needs an int rank"),
    "a fractional rank": (_set("rank", 0.5), "needs an int rank"),
    "columns not a pair": (_set("cols", [0]), "columns [start, stop) as two ints"),
    "rows not a number": (_set("rows", {"a": 1}), "int rows and cache_rows >= 0"),
    "a plan for 2 ranks": ("2 ranks", "is for 2 ranks, not mpiexec -n 1; plan again for the world you run in"),
    "other tables": (_rename, "it has no table C1, C2; the model has no table X; plan exactly the model's tables"),
    "another dim": (_widen, "table C1 has dim 8 in the model but 16 in the plan; plan each table at its dim"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_plan_is_one_line_that_names_the_file(case, plans, tmp_path, capsys):
    content, says = BAD[case]
    path = tmp_path / "plan.json"
    if content == "folder":
        path.mkdir()
    elif content == "2 ranks":
        path = plans[2]
    elif callable(content):
        d = json.loads(plans[1].read_text())
        content(d)
        path.write_text(json.dumps(d))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert train_main([*TINY, "--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and len(err) < 1000, err
    assert err.startswith(f"train.py: error: --plan {path}") and says in err, err


def test_tools_train_py_says_it_in_one_line_too(tmp_path):
    path = tmp_path / "absent.json"
    out = subprocess.run([sys.executable, TRAIN, *TINY, "--plan", path], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "GPUEMB_DEVICE": "cpu"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == (f"train.py: error: --plan {path}: cannot read it (No such file or directory); write one "
                          "with tools/plan.py --json\n")


def test_a_model_of_two_collections_takes_one_plan_of_all_their_tables(tmp_path, capsys):
    """deepfm's first-order tables, '<name>_linear' of dim 1, are a second collection: the plan places them too."""
    tables = [{"name": n, "rows": 1000, "dim": 8, "sharding": "column"} for n in FEATURES]
    first = make_plan(tmp_path, "first", tables, 1)
    args = [*BASE, "--model", "deepfm", "--metrics-out", str(tmp_path / "m.jsonl")]
    assert train_main([*args, "--plan", str(first)]) == 2
    err = capsys.readouterr().err
    assert "it has no table C1_linear, C2_linear, C3_linear" in err and "and 18 more; plan exactly" in err, err
    both = make_plan(tmp_path, "both", tables + [{"name": f"{n}_linear", "rows": 1000, "dim": 1} for n in FEATURES], 1)
    assert train_main([*args, "--plan", str(both)]) == 0
    assert len(losses(tmp_path / "m.jsonl")) == 2


@pytest.fixture
def launch(mpi_run):
    """``launch(n, *args)``: tools/train.py on ``n`` ranks (1: plain python), finished."""
    return lambda n, *args: mpi_run(n, TRAIN, *args, timeout_s=300, GPUEMB_COMM_TIMEOUT="60")


def on_rank_1(plan, folder):
    """``plan`` (a 2-rank plan's path) with every table-wise table moved to rank 1, as a user may edit it."""
    d = json.loads(plan.read_text())
    for p in d["placements"]:
        if p["kind"] == "table":
            p["shards"][0]["rank"] = 1
    path = folder / "on_rank_1.json"
    path.write_text(json.dumps(d))
    return path


def ended_well(out):
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.slow
def test_two_ranks_train_on_the_plan_file_as_one_process_does(plans, tmp_path, launch):
    plan = on_rank_1(plans[2], tmp_path)
    out = ended_well(launch(2, *TINY, "--plan", plan, "--metrics-out", tmp_path / "two.jsonl"))
    assert f"tables (--plan {plan}): 13 table-wise on rank 1, 13 column-wise over 2 ranks" in out, out
    ended_well(launch(1, *TINY, "--metrics-out", tmp_path / "one.jsonl"))
    one, two = losses(tmp_path / "one.jsonl"), losses(tmp_path / "two.jsonl")
    assert len(one) == 2 and two == pytest.approx(one, rel=1e-5)


@pytest.mark.slow
def test_a_plan_for_another_world_is_one_line_a_rank(plans, launch):
    out = launch(2, *TINY, "--plan", plans[1])
    assert out.returncode == 2, out.stdout + out.stderr
    says = f"--plan {plans[1]} is for 1 ranks, not mpiexec -n 2; plan again for the world you run in"
    assert out.stderr.count(says) == 2 and out.stderr.count("\n") <= 2, out.stderr  # the ranks' lines may interleave


@pytest.mark.slow
@pytest.mark.parametrize("ranks, how", [(2, "the plan"), (1, "a plan for 1 rank"), (1, "auto"), (2, "auto")])
def test_a_checkpoint_of_a_plan_run_resumes_on_it_and_in_another_world(ranks, how, plans, tmp_path, launch):
    plan = on_rank_1(plans[2], tmp_path)
    ckpt = ["--checkpoint-dir", tmp_path / "ckpt"]
    ended_well(launch(2, *TINY, "--plan", plan, *ckpt))
    resumed = {"the plan": ["--plan", plan], "a plan for 1 rank": ["--plan", plans[1]], "auto": []}[how]
    out = ended_well(launch(ranks, *TINY, "--steps", "4", "--resume", *ckpt, *resumed, "--metrics-out",
                            tmp_path / "resumed.jsonl"))
    assert "resumed at step 2" in out, out
    ended_well(launch(1, *TINY, "--steps", "4", "--metrics-out", tmp_path / "straight.jsonl"))
    straight, again = losses(tmp_path / "straight.jsonl"), losses(tmp_path / "resumed.jsonl")
    assert sorted(again) == [3, 4] and again == pytest.approx({s: straight[s] for s in (3, 4)}, rel=1e-5)
    shutil.rmtree(tmp_path / "ckpt")


def test_fp16_steps_refuse_a_plan_that_splits_a_table_by_columns_under_rowwise_adagrad(plans):
    """What the config refuses of --sharding column, found in the plan before any shard is made (fp16 runs on a
    GPU, so the Cluster alone, on a world of 2 that is never called)."""
    tables = [TableConfig(n, 8, rule=RULES["adagrad" if n == "C2" else "rowwise_adagrad"]()) for n in FEATURES]
    model = models.build("dlrm", 13, tables, bottom=(16,), top=(16, 8))
    for precision, refused in (("fp16", True), ("fp32", False)):
        config = TrainConfig.from_dict({"precision": precision, "plan": str(plans[2])})
        c = Cluster(SimpleNamespace(rank=0, world_size=2, name="fake"), config)
        if refused:  # the even tables are split by columns; C2 under adagrad, which needs no sums
            with pytest.raises(ConfigError, match=f"--plan {plans[2]}: table C4 is split by columns under rowwise"):
                c.shard(model, 32)
        else:
            assert c._read_plan(model).placement("C4").kind == "column"


def test_plan_out_writes_the_plan_a_run_trained_on_which_trains_the_same_bits_and_estimates(tmp_path, capsys):
    """--plan-out: the planner's plan of a one-process --deterministic run (which shards its tables), written as
    tools/plan.py --json writes one. Trained on again with --plan it gives the same losses, bit for bit, and
    tools/plan.py --plan estimates its step."""
    out = tmp_path / "plan.json"
    args = [*TINY, "--deterministic", "2", "--sharding", "row"]
    assert train_main([*args, "--plan-out", str(out), "--metrics-out", str(tmp_path / "a.jsonl")]) == 0
    written = json.loads(out.read_text())
    assert [p["table"]["name"] for p in written["placements"]] == FEATURES
    assert {p["kind"] for p in written["placements"]} == {"row"} and written["world_size"] == 1
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # written whole, then renamed
    assert train_main([*args, "--plan", str(out), "--metrics-out", str(tmp_path / "b.jsonl")]) == 0
    first, again = losses(tmp_path / "a.jsonl"), losses(tmp_path / "b.jsonl")
    assert len(first) == 2 and again == first
    est = subprocess.run([sys.executable, PLAN, "--plan", out, "--link", "ib100"], capture_output=True, text=True,
                         timeout=120)
    assert est.returncode == 0 and "estimated step over ib100" in est.stdout, est.stdout + est.stderr


@pytest.mark.parametrize("case", ["tables whole", "no such folder"])
def test_a_plan_out_that_cannot_be_written_is_one_line(case, tmp_path, capsys):
    target = tmp_path / "plan.json" if case == "tables whole" else tmp_path / "absent" / "plan.json"
    extra = [] if case == "tables whole" else ["--deterministic", "2"]
    assert train_main([*TINY, *extra, "--plan-out", str(target)]) == 2
    err = capsys.readouterr().err
    says = {"tables whole": "a run of one process keeps its tables whole, so it has no plan to write",
            "no such folder": "cannot write it (No such file or directory); give a file in a folder that exists"}
    assert len(err.splitlines()) == 1 and err.startswith(f"train.py: error: --plan-out {target}: {says[case]}"), err
    assert not target.exists() and not list(tmp_path.rglob("*.tmp-*"))
