"""Key skew: Zipf shares and distinct keys against direct sums, owners of sampled keys, and the fit to a sample."""
import numpy as np
import pytest

from gpuemb.sharding.plan import owner_hash
from gpuemb.sharding.skew import EXACT, KeySkew, zipf_norm


def test_zipf_shares_by_hand():
    k = KeySkew(1.0)  # 4 keys: 1, 1/2, 1/3, 1/4 over 25/12
    assert k.top_share(1, 4) == pytest.approx(12 / 25) and k.rank_share(2, 4) == pytest.approx(6 / 25)
    assert k.top_share(9, 4) == pytest.approx(1.0)
    assert k.owner_shares(4, 2) == pytest.approx([16 / 25, 9 / 25])
    assert k.owner_shares(4, 2, start=1) == pytest.approx([9 / 25, 16 / 25])
    assert k.owner_shares(4, 2, skip=1) == pytest.approx([4 / 25, 9 / 25])  # the hottest replicated


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.05, 1.3])
def test_large_tables_match_the_direct_sums(alpha):
    rows, n = 3 * EXACT + 17, 50_000
    p = np.arange(1, rows + 1, dtype=np.float64) ** -alpha
    assert zipf_norm(alpha, rows) == pytest.approx(p.sum(), rel=1e-9)
    p /= p.sum()
    k = KeySkew(alpha)
    assert k.unique_rows(n, rows) == pytest.approx(-np.expm1(n * np.log1p(-p)).sum(), rel=1e-6)
    assert k.top_share(EXACT + 100, rows) == pytest.approx(p[:EXACT + 100].sum(), rel=1e-9)
    assert k.owner_shares(rows, 3).sum() == pytest.approx(1.0)


def test_uniform_keys():
    assert KeySkew(0.0).unique_rows(100, 1000) == pytest.approx(1000 * (1 - (1 - 1 / 1000) ** 100))
    assert KeySkew(0.0).owner_shares(1000, 4) == pytest.approx([0.25] * 4)


def test_a_sample_gives_its_hot_keys_their_owners_and_alpha(rng):
    keys = rng.permutation(np.arange(10 ** 6, 10 ** 6 + 400))
    counts = np.round(4000 / np.arange(1, 401)).astype(int)  # Zipf 1
    sample = rng.permutation(np.repeat(keys, counts))
    k = KeySkew.from_sample(sample, top=50)
    assert k.alpha == pytest.approx(1.0, abs=0.05) and k.hot_keys[:3] == tuple(int(x) for x in keys[:3])
    assert k.hot_shares[0] == pytest.approx(4000 / sample.size)
    shares = k.owner_shares(400, 2)
    owner = owner_hash(keys[:50]) % 2
    rest = (1 - sum(k.hot_shares)) / 2
    assert shares == pytest.approx([sum(s for s, o in zip(k.hot_shares, owner) if o == r) + rest for r in (0, 1)])


@pytest.mark.parametrize("kwargs,message", [
    ({"alpha": -1}, "alpha=-1; use a Zipf exponent >= 0"),
    ({"hot_keys": (1, 2), "hot_shares": (0.5,)}, "2 hot keys but 1 shares"),
    ({"hot_keys": (1, 2), "hot_shares": (0.2, 0.5)}, "hottest first"),
])
def test_bad_skew_is_one_line(kwargs, message):
    with pytest.raises(ValueError, match="^key skew: ") as e:
        KeySkew(**kwargs)
    assert message in str(e.value)
    with pytest.raises(ValueError, match="holds no keys"):
        KeySkew.from_sample(np.zeros(0, np.int64))
