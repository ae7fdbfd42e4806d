"""The synthetic generator: determinism, the Zipf shape of ids, and the teacher's AUC."""
import json

import h5py
import numpy as np
import pytest

from gpuemb.io.shards import ShardSource
from gpuemb.io.synthetic import (PRESETS, SyntheticConfig, SyntheticSource, auc, generate, teacher_auc,
                                 write_synthetic)

SMALL = SyntheticConfig(n_dense=3, cardinalities=(1000, 50, 7), seed=5)


def test_rows_depend_only_on_seed_split_and_index():
    a, la = generate(SMALL, 0, 2000)
    b, lb = generate(SMALL, 1500, 500)
    for x, y in zip(a.slice(1500, 2000).arrays(), b.arrays()):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(la[1500:], lb)
    assert not np.array_equal(generate(SMALL, 0, 2000, "test")[0].sparse, a.sparse)
    other = SyntheticConfig(n_dense=3, cardinalities=(1000, 50, 7), seed=6)
    assert not np.array_equal(generate(other, 0, 2000)[0].sparse, a.sparse)
    assert a.sparse.min() >= 0 and (a.sparse.max(axis=0) < [1000, 50, 7]).all()


def test_ids_follow_zipf_with_the_configured_alpha():
    config = SyntheticConfig(n_dense=1, cardinalities=(1000,), alpha=1.05, seed=1)
    n = 200_000
    counts = np.sort(np.bincount(generate(config, 0, n)[0].sparse[:, 0], minlength=1000))[::-1]
    p = np.arange(1, 1001) ** -1.05
    p /= p.sum()
    for r in range(5):  # the hottest ids, within 4 standard deviations of the exact Zipf frequencies
        assert abs(counts[r] - n * p[r]) < 4 * np.sqrt(n * p[r] * (1 - p[r])), (r, counts[r], n * p[r])
    assert abs(counts[:100].sum() / n - p[:100].sum()) < 0.01
    hot = np.bincount(generate(config, 0, n)[0].sparse[:, 0]).argmax()
    assert hot != 0  # the rank-to-id bijection moves the hottest id away from 0


def test_reported_teacher_auc_matches_a_pairwise_count():
    n = 3000
    batch, logit = generate(SMALL, 0, n, "test")
    pos, neg = logit[batch.label == 1], logit[batch.label == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    pairwise = wins / (pos.size * neg.size)
    assert teacher_auc(SMALL, n) == pytest.approx(pairwise, abs=1e-12)
    assert auc([0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]) == pytest.approx(0.875)


def test_labels_are_drawn_from_the_teacher_probabilities():
    batch, logit = generate(SMALL, 0, 100_000)
    p = 1 / (1 + np.exp(-logit))
    for lo, hi in ((0.0, 0.1), (0.1, 0.3), (0.3, 0.6), (0.6, 1.0)):
        sel = (p >= lo) & (p < hi)
        assert sel.sum() > 1000
        assert abs(batch.label[sel].mean() - p[sel].mean()) < 4 * np.sqrt(0.25 / sel.sum())
    assert abs(batch.label.mean() - SMALL.base_ctr) < 0.02


@pytest.mark.parametrize("preset", ["small", "criteo"])
def test_presets_have_a_teacher_auc_well_above_chance(preset):
    value = teacher_auc(PRESETS[preset], 100_000)
    assert 0.78 < value < 0.9


def test_multi_hot_tables_fill_their_columns():
    config = SyntheticConfig(n_dense=2, cardinalities=(100, 10), hotness=(1, 3))
    batch, _ = generate(config, 0, 1000)
    assert batch.sparse.shape == (1000, 4) and batch.sparse[:, 1:].max() < 10 and batch.sparse[:, 0].max() > 10
    with pytest.raises(ValueError, match="hotness"):
        SyntheticConfig(cardinalities=(10, 10), hotness=(1,)).validate()


def test_source_and_shards_hold_the_generated_rows(tmp_path):
    source = SyntheticSource(SMALL, 1000, block_rows=300)
    assert list(source.block_sizes) == [300, 300, 300, 100]
    np.testing.assert_array_equal(source.read_block(2).sparse, generate(SMALL, 600, 300)[0].sparse)
    out = write_synthetic(SMALL, tmp_path, {"train": 1000, "test": 2000})
    paths, test_auc = out["test"]
    assert test_auc == pytest.approx(teacher_auc(SMALL, 2000))
    with h5py.File(paths[0]) as f:
        assert json.loads(f.attrs["meta"])["teacher_auc"] == test_auc
    with ShardSource(out["train"][0]) as shards:
        first = shards.block_sizes[0]
        np.testing.assert_array_equal(shards.read_block(0).dense, generate(SMALL, 0, first)[0].dense)
