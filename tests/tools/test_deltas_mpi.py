"""Deltas of a run on 2 ranks under a real ``mpiexec``: each rank writes its shards' file of every delta, the index
lists both, and a bundle of an early sharded checkpoint plus the deltas after it equals the export of the last one,
bit for bit in fp32 rows, whether the tables are split by rows, by columns or placed whole; a run resumed at another
world size continues the chain, and a bundle follows it across."""
from pathlib import Path

import numpy as np
import pytest

from gpuemb.serve import Predictor
from gpuemb.serve.bundle import write_bundle
from gpuemb.serve.checkpoint import load_export
from gpuemb.serve.delta_chain import read_index, table_files
from gpuemb.store.snapshot import read_snapshot

TRAIN = Path(__file__).resolve().parents[2] / "tools" / "train.py"
pytestmark = pytest.mark.slow
SMALL = ["--batch-size", "64", "--train-rows", "3000", "--eval-rows", "300", "--no-progress", "--tables",
         "per-feature", "--embedding-dim", "4", "--model-arg", "top=[16]", "--model-arg", "bottom=[8]",
         "--keep-checkpoints", "4", "--delta-every", "2", "--evict-every", "2", "--evict-ttl", "3"]


@pytest.fixture
def launch(mpi_run, tmp_path):
    """``launch(n, *args)``: tools/train.py on ``n`` ranks writing into tmp_path's ckpt and deltas, finished."""
    def run(n, *args):
        out = mpi_run(n, TRAIN, *SMALL, "--checkpoint-dir", tmp_path / "ckpt", "--delta-dir", tmp_path / "deltas",
                      *args, timeout_s=300, GPUEMB_COMM_TIMEOUT="60")
        assert out.returncode == 0, out.stdout + out.stderr
    return run


def _bundle(folder, step):
    got = load_export(folder / "ckpt" / f"step-{step:09d}")  # what tools/export.py does, sharded or not
    out = folder / f"bundle-{step}"
    write_bundle(got["model"], out, "fp32", got["names"], got["hotness"], got["sources"], got["origin"])
    return out


def _follows(folder, first, last):
    """Apply the deltas after ``first`` to its bundle, by any rank's file, and compare with ``last``'s bundle."""
    _, entries = read_index(folder / "deltas")
    rng = np.random.default_rng(5)
    with Predictor(_bundle(folder, first), runtime="numpy") as p, \
            Predictor(_bundle(folder, last), runtime="numpy") as final:
        sparse = rng.integers(0, 200, (300, p.manifest["n_features"]))
        dense = rng.normal(size=(300, p.manifest["n_dense"])).astype(np.float32)
        for e in (e for e in entries if e["since"] >= first):
            p.apply_delta(folder / "deltas" / table_files(e)[-1]["file"])
        assert p.step == last
        for name, want in final.tables.items():
            got = p.tables[name]
            np.testing.assert_array_equal(got.keys, want.keys)
            np.testing.assert_array_equal(got.lookup(got.keys), want.lookup(want.keys))  # bit for bit
        np.testing.assert_array_equal(p.predict(dense, sparse), final.predict(dense, sparse))


@pytest.mark.parametrize("sharding", ["row", "column", "table"])
def test_an_early_sharded_bundle_plus_the_rank_deltas_is_the_final_export(sharding, tmp_path, launch):
    launch(2, "--steps", "6", "--checkpoint-every", "3", "--sharding", sharding)
    _, entries = read_index(tmp_path / "deltas")
    assert [e["step"] for e in entries] == [2, 3, 4, 6]
    kinds, deleted = set(), 0
    for e in entries:
        files = [f["file"] for f in table_files(e)]
        assert files == [f"delta-{e['step']:09d}.rank{r}-of-2.h5" for r in range(2)]
        snaps = [read_snapshot(tmp_path / "deltas" / f) for f in files]
        marks = [s.meta["sharded"] for s in snaps]
        assert [(m["rank"], m["world_size"]) for m in marks] == [(0, 2), (1, 2)]
        kinds |= {i["kind"] for m in marks for i in m["shards"].values()}
        deleted += sum(t.extra("deleted").size for s in snaps for t in s.tables.values())
        if sharding == "column":  # every column shard of a table changes the same keys at the same steps
            for name in snaps[0].tables:
                keys = [np.sort(np.concatenate([k for k, _, _ in s.tables[name].chunks()])) for s in snaps]
                np.testing.assert_array_equal(*keys)
    assert kinds == {sharding} and deleted > 0
    _follows(tmp_path, 3, 6)


def test_a_run_resumed_at_another_world_size_continues_the_chain(tmp_path, launch):
    launch(2, "--steps", "4", "--checkpoint-every", "2", "--sharding", "row")
    chain, entries = read_index(tmp_path / "deltas")
    launch(1, "--steps", "6", "--checkpoint-every", "2", "--resume")
    again, resumed = read_index(tmp_path / "deltas")
    assert again == chain and resumed[:2] == entries
    assert [(e["step"], len(table_files(e))) for e in resumed] == [(2, 2), (4, 2), (6, 1)]
    _follows(tmp_path, 2, 6)  # across the change: a delta of 2 ranks, then one of 1
