"""tools/train.py on shards with jagged features: bags of any length, empty ones included, pooled by each model."""
import numpy as np
import pytest

from gpuemb.io.bags import Bags
from gpuemb.io.batch import Batch
from gpuemb.io.shards import ShardLayout, ShardWriter, WriteOptions

from .test_train import summary, train

LAYOUT = ShardLayout(("y",), ("d0", "d1"), ("user", "tags", "slot", "items"), (1, 0, 2, 0))


def planted_rows(n, rng, weights):
    """Rows whose label is drawn from a logistic teacher over the sum of its keys' weights, the jagged bags'
    weights averaged (empty bags add nothing)."""
    lengths = rng.integers(0, 7, (n, 2)).astype(np.int32)
    values = rng.integers(0, 300, int(lengths.sum()))
    sparse = rng.integers(0, 300, (n, 3))
    score = weights[0, sparse[:, 0]] + weights[2, sparse[:, 1:]].sum(axis=1)
    flat = lengths.ravel()
    starts = np.cumsum(flat) - flat
    owner = np.tile([1, 3], n)  # the weights of each bag's feature
    sums = np.array([weights[f, values[s:s + k]].sum() for f, s, k in zip(owner, starts, flat)])
    score += (sums / np.maximum(flat, 1)).reshape(n, 2).sum(axis=1) * 2
    label = (rng.random(n) < 1 / (1 + np.exp(-score))).astype(np.float32)
    return Batch(label, rng.random((n, 2)).astype(np.float32), sparse, Bags(lengths, values))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jagged")
    rng = np.random.default_rng(11)
    weights = rng.normal(0, 1, (4, 300))
    for split, n in (("train", 30000), ("test", 5000)):
        writer = ShardWriter(folder / split, LAYOUT, WriteOptions(chunk_rows=1024, rows_per_shard=8192))
        writer.append(planted_rows(n, rng, weights))
        writer.close()
    return folder


@pytest.mark.parametrize("model, tables, pooling", [("dlrm", "shared", "mean"), ("dcn", "per-feature", "sum")])
def test_jagged_shards_train_and_learn(shards, model, tables, pooling):
    out = train("--data", shards, "--model", model, "--tables", tables, "--steps", "120", "--batch-size", "256",
                "--eval-rows", "5000", "--no-progress", "--model-arg", f"pooling={pooling}")
    auc, _ = summary(out)
    assert auc > 0.75, out.stdout  # the planted teacher's signal, read through the pooled bags
