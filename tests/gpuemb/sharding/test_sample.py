"""``sample_skews`` on shards written with a planted skew: the measured Zipf exponent and hot keys against the
planted ones, the rows it reads, ``tools/plan.py --sample`` on them, and one clear error for bad input."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from gpuemb.io.batch import Batch
from gpuemb.io.shards import ShardLayout, ShardWriter, WriteOptions
from gpuemb.sharding.sample import sample_skews
from gpuemb.sharding.spec import TableSpec

# shards written here have no manifest (the converter writes it), which ShardSource warns of
pytestmark = pytest.mark.filterwarnings("ignore::gpuemb.io.errors.UnlistedShardWarning")

PLAN_TOOL = pathlib.Path(__file__).resolve().parents[3] / "tools" / "plan.py"
N, ALPHA, KEYS, HOT, HOT_SHARE = 20_000, 1.05, 1000, 10, 0.5
TABLES = [TableSpec("zipf", KEYS, 4), TableSpec("hot", 1 << 20, 4)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``(folder, hot keys)``: 20000 rows in 3 shards of two one-hot features: ``zipf``, 1000 random keys drawn by
    Zipf 1.05 on their rank; ``hot``, half the rows on 10 planted keys (evenly), the rest uniform over 2^40."""
    rng = np.random.default_rng(11)
    p = np.arange(1, KEYS + 1) ** -ALPHA
    zipf = rng.choice(1 << 40, KEYS, replace=False)[rng.choice(KEYS, N, p=p / p.sum())]
    hot_keys = rng.choice(1 << 40, HOT, replace=False)
    hot = np.where(rng.random(N) < HOT_SHARE, hot_keys[rng.integers(0, HOT, N)], rng.integers(0, 1 << 40, N))
    folder = tmp_path_factory.mktemp("shards")
    writer = ShardWriter(str(folder), ShardLayout(("y",), ("d",), ("zipf", "hot")),
                         WriteOptions(chunk_rows=1024, rows_per_shard=8192))
    writer.append(Batch(rng.integers(0, 2, N).astype(np.float32), rng.normal(size=(N, 1)).astype(np.float32),
                        np.stack([zipf, hot], axis=1)))
    assert len(writer.close()) == 3
    return folder, set(hot_keys.tolist())


def test_the_measured_skew_is_the_planted_one(data):
    folder, hot_keys = data
    skews = sample_skews(str(folder), TABLES, rows=N)
    # the fit over keys seen 5 times or more reads 1.01 to 1.04 on such samples (seeds 0..5): within 0.1
    assert skews["zipf"].alpha == pytest.approx(ALPHA, abs=0.1)
    # the 10 planted keys are the 10 hottest, with half the lookups: within 0.02, 5 binomial sigmas of 20000 rows
    hot = skews["hot"]
    assert set(hot.hot_keys[:HOT]) == hot_keys
    assert sum(hot.hot_shares[:HOT]) == pytest.approx(HOT_SHARE, abs=0.02)
    assert hot.hot_shares[HOT] < 0.001  # the uniform rest: a key or two each
    assert skews["zipf"].source == f"a sample of {N} lookups"


def test_it_reads_the_first_rows_across_shards(data):
    # 9000 rows: the first shard (8192 rows) and part of the second
    assert sample_skews(str(data[0]), TABLES, rows=9000)["hot"].source == "a sample of 9000 lookups"


def test_the_plan_tool_estimates_with_the_sample(data, tmp_path):
    config = tmp_path / "tables.json"
    config.write_text(json.dumps([t.to_dict() for t in TABLES]))
    out = subprocess.run([sys.executable, str(PLAN_TOOL), "--config", str(config), "--world-size", "2",
                          "--device-gb", "1", "--link", "ib100", "--sample", str(data[0])],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "key skew of 2 of 2 tables: Zipf alpha" in out.stdout and "a sample)" in out.stdout


@pytest.mark.parametrize("where, message", [
    ("missing", "no such file or folder; give a shard or a folder of shards"),
    ("empty", "holds no part-*.h5 shards"),
])
def test_a_path_without_data_is_one_clear_error(tmp_path, where, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError) as e:
        sample_skews(str(tmp_path / where), TABLES)
    assert message in str(e.value) and str(tmp_path / where) in str(e.value) and "\n" not in str(e.value)


def test_bad_tables_and_rows_are_one_clear_error(data):
    with pytest.raises(ValueError, match="no sparse column for table.s. user; its columns are zipf, hot"):
        sample_skews(str(data[0]), [TableSpec("user", 10, 4)])
    with pytest.raises(ValueError, match="rows=0; read at least 1 row"):
        sample_skews(str(data[0]), TABLES, rows=0)
