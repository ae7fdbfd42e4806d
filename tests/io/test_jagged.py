"""Jagged features: the feature-major CSR layout against a per-bag reference, single-hot detection, DLPack round
trips, and one-line errors that name the feature and the row."""
import numpy as np
import pytest

from gpuemb.io.jagged import JaggedError, JaggedFeatures

NAMES = ("a", "b", "c")


def _random(rng, B=7, max_len=4, weights=False):
    """Bags per (feature, sample), the reference, and the lengths ``[F, B]`` (some bags empty)."""
    lengths = rng.integers(0, max_len + 1, (len(NAMES), B))
    bags = [[rng.integers(-(1 << 62), 1 << 62, n) for n in row] for row in lengths]
    w = [[rng.random(n).astype(np.float32) for n in row] for row in lengths] if weights else None
    return bags, w, lengths


def test_from_lengths_lays_bags_out_feature_major(rng):
    bags, w, lengths = _random(rng, weights=True)
    values = np.concatenate([k for row in bags for k in row])
    jf = JaggedFeatures.from_lengths(NAMES, values, lengths, np.concatenate([x for row in w for x in row]))
    assert jf.batch_size == 7 and jf.n_features == 3 and not jf.single_hot
    np.testing.assert_array_equal(jf.lengths(), lengths)
    for f, name in enumerate(NAMES):
        keys, offsets, weights = jf.feature(name)
        assert offsets[0] == 0 and offsets.shape == (8,)
        for b in range(7):
            np.testing.assert_array_equal(keys[offsets[b]:offsets[b + 1]], bags[f][b])
            np.testing.assert_array_equal(weights[offsets[b]:offsets[b + 1]], w[f][b])
    again = JaggedFeatures.from_offsets(NAMES, jf.values, jf.offsets, jf.weights)
    np.testing.assert_array_equal(again.lengths(), lengths)


def test_single_hot_is_the_dense_matrix(rng):
    sparse = rng.integers(0, 1 << 40, (9, 3))
    jf = JaggedFeatures.from_dense(NAMES, sparse)
    assert jf.single_hot
    np.testing.assert_array_equal(jf.dense(), sparse)
    same = JaggedFeatures.from_lengths(NAMES, sparse.T.ravel(), np.ones((3, 9), np.int64))
    assert same.single_hot
    np.testing.assert_array_equal(same.dense(), sparse)
    bags, _, lengths = _random(rng)
    multi = JaggedFeatures.from_lengths(NAMES, np.concatenate([k for row in bags for k in row]), lengths)
    with pytest.raises(JaggedError, match="pool it instead"):
        multi.dense()


def test_every_array_crosses_dlpack(rng):
    bags, w, lengths = _random(rng, weights=True)
    jf = JaggedFeatures.from_lengths(NAMES, np.concatenate([k for row in bags for k in row]), lengths,
                                     np.concatenate([x for row in w for x in row]))
    arrays = {name: np.from_dlpack(a) for name, a in jf.arrays().items()}
    back = JaggedFeatures.from_offsets(NAMES, arrays["values"], arrays["offsets"], arrays["weights"])
    for name, a in back.arrays().items():
        np.testing.assert_array_equal(a, jf.arrays()[name])


@pytest.mark.parametrize("case, match", [
    ("negative", r"feature 'b', row 2: a negative length \(-1\)"),
    ("cap", r"feature 'c', row 4: more than max_bag=3 keys \(5\)"),
    ("short", r"feature 'c': offsets end at 10 but there are 12 values"),
    ("start", r"feature 'a', row 0: offsets start at 1"),
    ("decreasing", r"feature 'a', row 1: a negative length"),
    ("weights", r"11 weights for 12 values"),
    ("names", r"one distinct non-empty string per feature"),
])
def test_bad_input_names_the_feature_and_the_row(case, match):
    lengths = np.ones((3, 5), np.int64)
    values = np.arange(15)
    if case == "negative":
        lengths[1, 2] = -1
        call = lambda: JaggedFeatures.from_lengths(NAMES, values[:13], lengths)  # noqa: E731
    elif case == "cap":
        lengths[2, 4] = 5
        call = lambda: JaggedFeatures.from_lengths(NAMES, np.arange(19), lengths, max_bag=3)  # noqa: E731
    elif case == "short":
        call = lambda: JaggedFeatures.from_offsets(NAMES, np.arange(12), np.arange(16) * 10 // 15)  # noqa: E731
    elif case == "start":
        call = lambda: JaggedFeatures.from_offsets(NAMES, values, np.arange(1, 17))  # noqa: E731
    elif case == "decreasing":
        offsets = np.arange(16)
        offsets[1] = 3
        call = lambda: JaggedFeatures.from_offsets(NAMES, values, offsets)  # noqa: E731
    elif case == "weights":
        call = lambda: JaggedFeatures.from_offsets(NAMES, np.arange(12), np.minimum(np.arange(16), 12),  # noqa: E731
                                                   np.ones(11))
    else:
        call = lambda: JaggedFeatures.from_dense(("a", "a", "b"), np.zeros((2, 3), np.int64))  # noqa: E731
    with pytest.raises(JaggedError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("values", [[1.5, 2.0], [True, False]])
def test_keys_that_are_not_integers_are_refused_before_a_cast_truncates_them(values):
    from gpuemb.key_types import KeyTypeError
    with pytest.raises(KeyTypeError, match="JaggedFeatures values: keys of dtype"):
        JaggedFeatures.from_lengths(["a"], np.array(values), [[1, 1]])
