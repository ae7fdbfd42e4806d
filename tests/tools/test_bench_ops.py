"""tools/bench_ops.py given a shape, as a user runs it (a subprocess, tiny shapes): its result's fields, its one-line
errors, and the store's pooled output and the napkin bytes against references. Speed belongs in benchmarks: no
time or rate is compared with a number here."""
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))  # as the tools import each other
import bench_shape  # noqa: E402
import bench_shaped_ops as ops  # noqa: E402
import benchlib  # noqa: E402
TINY = {"tables": 3, "rows": [50, 2000, 7], "dims": [4, 8, 4], "batch": 32, "bag": "poisson:3", "zipf": 1.05}


def tool(*args):
    env = {**os.environ, "GPUEMB_DEVICE": "cpu"}
    return subprocess.run([sys.executable, str(TOOLS / "bench_ops.py"), *args], env=env, capture_output=True,
                          text=True, timeout=300)


def shape_file(tmp_path, **fields):
    path = tmp_path / "shape.json"
    path.write_text(json.dumps(fields))
    return str(path)


def one_error_line(out):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_a_json_shape_of_mixed_dims_runs_beside_its_peer_and_writes_every_field(tmp_path):
    out = tool("--shape", shape_file(tmp_path, **TINY), "--batch", "16", "--quick", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["shape"]["dims"] == [4, 8, 4] and r["shape"]["batch"] == 16  # the flag won over the file
    assert r["copy_GB/s"] > 0 and r["cached_copy_GB/s"] > 0
    torch_here = importlib.util.find_spec("torch") is not None
    assert (r["peer"] is not None) == torch_here, r["peer_note"]
    assert [row["op"] for row in r["rows"]] == ["forward", "backward+update"]
    sides = ("", "peer_") if torch_here else ("",)
    for row in r["rows"]:
        assert row["bytes"] > 0
        for side in sides:
            for key in ("ms", "GB/s", "%ceiling"):
                assert math.isfinite(row[side + key]) and row[side + key] > 0, (side, key, row)
        assert not torch_here or row["peer/ours"] == pytest.approx(row["peer_ms"] / row["ms"])
    assert "% ceiling" in out.stdout and "over 100%" in out.stdout


def test_the_table_keeps_its_columns_in_line_whatever_the_widths():
    columns = [benchlib.Column("op", "op"), benchlib.Column("ms", "ms", ".3f"), benchlib.Column("x", "x", ".1f")]
    rows = [{"op": "a much longer op name than the title", "ms": 12345.678}, {"op": "b", "ms": 1.0, "x": 2.0}]
    table = benchlib.Table(columns, rows)
    lines = [table.header()] + [table.line(r) for r in rows]
    ends = {len(line) for line in lines}
    assert len(ends) == 1 and lines[1].endswith("-") and lines[2].endswith("2.0"), lines


def test_a_negative_size_in_the_file_is_one_line_and_exit_2(tmp_path):
    path = shape_file(tmp_path, **{**TINY, "rows": [50, -2000, 7]})
    line = one_error_line(tool("--shape", path))
    assert f"{path}: rows: -2000 is below 1" in line


def test_an_unknown_key_is_one_line_naming_it_and_the_known_ones(tmp_path):
    line = one_error_line(tool("--shape", shape_file(tmp_path, tabels=3)))
    assert "unknown key 'tabels'" in line and "tables, rows, dims" in line


@pytest.mark.parametrize("bag, says", [("uniform:9:2", "0 <= LO <= HI"), ("gauss:3", "unknown distribution"),
                                       ("zipf:1.2", "takes 2 number(s)"), ("two", "not a bag size")])
def test_a_bad_bag_distribution_is_one_line(bag, says):
    with pytest.raises(bench_shape.ShapeError, match=r"^--bag: ") as e:
        bench_shape.resolve({"bag": bag})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_bad_flag_is_one_line_from_the_tool():
    line = one_error_line(tool("--tables", "2", "--dims", "8,16,32"))
    assert line == "bench_ops.py: error: --dims: 3 values for 2 tables; give one for all, or one per table"


def test_the_shape_names_are_the_stores():
    from gpuemb.kernels.embedding_bag import MODES
    from gpuemb.optim.rule import RULES
    from gpuemb.store.options import DTYPES, SHORT_DTYPES
    built_in = {name for name, rule in RULES.items() if rule.__module__.startswith("gpuemb.")}  # not tests' own
    assert set(bench_shape.OPTIMIZERS) == built_in and bench_shape.POOLINGS == MODES
    assert set(bench_shape.PRECISIONS.values()) == set(DTYPES)
    assert all(bench_shape.PRECISIONS[k] == v for k, v in SHORT_DTYPES.items())


def test_the_bag_lengths_and_ids_follow_their_law():
    rng = np.random.default_rng(5)
    assert set(bench_shape.BagSizes.parse("uniform:0:3").draw(rng, 4000)) == {0, 1, 2, 3}
    zipf = bench_shape.BagSizes.parse("zipf:1.5:50").draw(rng, 4000)
    assert zipf.min() == 1 and zipf.max() <= 50 and np.mean(zipf == 1) > 0.3
    assert (bench_shape.BagSizes.parse("7").draw(rng, 10) == 7).all()
    ids = bench_shape.zipf_ids(rng, 20000, 1000, 0.0)
    assert ids.min() >= 0 and ids.max() < 1000 and np.bincount(ids).max() < 60  # uniform: about 20 each
    skewed = np.bincount(bench_shape.zipf_ids(rng, 20000, 1000, 1.2), minlength=1000)
    zipf_top = 1 / (np.arange(1, 1001) ** -1.2).sum()  # the hottest id's odds under Zipf's discrete law
    assert skewed.max() / 20000 == pytest.approx(zipf_top, rel=0.15)
    assert sorted(np.argsort(skewed)[-3:]) != [0, 1, 2]  # the hot ids are scattered, not neighbours


@pytest.mark.parametrize("pooling", ["sum", "mean", "max"])
def test_the_stores_pooled_output_equals_a_numpy_reference(pooling):
    from gpuemb.autograd.backend import to_host
    shape = bench_shape.resolve({**{k: v if not isinstance(v, list) else ",".join(map(str, v))
                                    for k, v in TINY.items()}, "pooling": pooling, "seed": "11"})
    values, lengths = shape.batches(1)[0]
    table = ops.collection(shape)
    got = to_host(table(ops.jagged(shape, (values, lengths))).data)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    B, parts = shape.batch, []
    for t, (tab, dim) in enumerate(zip(table.tables, shape.per_table("dims"))):
        rows = {}
        for keys, w, _ in tab.export():
            rows.update(zip(keys.tolist(), to_host(w)[:, :dim]))  # the weights, then the rule's state
        pooled = np.zeros((B, dim), np.float32)
        for b in range(B):
            bag = values[offsets[t * B + b]:offsets[t * B + b + 1]]
            if bag.size:
                r = np.stack([rows[k] for k in bag.tolist()])
                pooled[b] = {"sum": r.sum(0), "mean": r.mean(0), "max": r.max(0)}[pooling]
        parts.append(pooled)
    assert (lengths == 0).any()  # Poisson(3) leaves some bags empty: they pool to zeros
    np.testing.assert_allclose(got, np.concatenate(parts, axis=1), rtol=1e-6, atol=1e-6)


def test_the_bytes_are_the_napkin_math_by_hand():
    shape = bench_shape.resolve({"tables": "2", "rows": "10", "dims": "4,8", "batch": "2", "bag": "2",
                                 "optimizer": "rowwise_adagrad"})
    values = np.array([1, 1, 2, 3, 5, 6, 5, 5])  # table 0: 3 distinct rows of 4 ids, table 1: 2 of 4
    lengths = np.array([2, 2, 2, 2])
    moved = ops.moved_bytes(shape, [(values, lengths)])
    indices, pooled = 8 * 8 + 8 * 5, 4 * 2 * 12
    assert moved["forward"] == 4 * 4 * 4 + 4 * 8 * 4 + indices + pooled  # every id's weights
    assert moved["backward"] == 2 * (3 * (4 + 1) * 4 + 2 * (8 + 1) * 4) + pooled + indices  # rows and their state
