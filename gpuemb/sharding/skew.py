"""Key skew: how a table's lookups fall on its keys, for the step-time estimate.

A ``KeySkew`` is a Zipf law of exponent ``alpha`` over the table's rows (the key of rank ``i``, from 1, draws a
share ``i^-alpha / H(n, alpha)`` of the lookups; 0 is uniform), as ``gpuemb.io.synthetic`` draws its ids
(``SyntheticConfig.alpha``, 1.05 by default), given or fitted to a sample; a sample also gives its hottest keys
and their shares, so that their owners are known (``owner_hash``) rather than modelled. What the estimate reads:

- ``top_share(h, rows)``: the share of lookups on the ``h`` hottest keys;
- ``unique_rows(n, rows)``: the expected distinct keys among ``n`` lookups, ``sum_i 1 - (1 - p_i)^n``;
- ``owner_shares(rows, W, start, skip)``: each hash residue's share of the lookups, the ``skip`` hottest keys left
  out (they are replicated). With sampled keys, their residues are ``owner_hash(key) % W``; the keys beyond them
  spread evenly. With a Zipf law alone the keys are unknown, so the model puts them as evenly as a hash could: the
  hottest ``RANKED`` keys round-robin, the hottest on residue ``start``, the rest evenly. So the hottest key's
  owner carries its share on top of an even part, the least imbalance a hash can give.

Sums over a table's rows are exact for the first ``EXACT`` ranks and a midpoint integral beyond, on a geometric
grid, so a table of 10^8 rows costs microseconds.
"""
import math
from dataclasses import dataclass

import numpy as np

from .plan import owner_hash

EXACT = 1 << 16
RANKED = 1 << 12
GRID = 2048


def _head(alpha, n):
    """The weights ``i^-alpha`` of ranks 1..n (n <= EXACT), float64."""
    return np.arange(1, n + 1, dtype=np.float64) ** -alpha


def _tail_grid(alpha, lo, hi):
    """Midpoints and widths of a geometric grid over ranks ``(lo, hi]``, and ``x^-alpha`` there."""
    edges = np.unique(np.geomspace(lo + 0.5, hi + 0.5, GRID + 1))
    mid, width = np.sqrt(edges[:-1] * edges[1:]), np.diff(edges)
    return mid ** -alpha, width


def zipf_norm(alpha, rows, upto=None):
    """``H(upto, alpha)``: the sum of ``i^-alpha`` over ranks 1..upto (all ``rows`` by default)."""
    n = rows if upto is None else min(upto, rows)
    head = _head(alpha, min(n, EXACT)).sum()
    if n <= EXACT:
        return float(head)
    a, b = EXACT + 0.5, n + 0.5  # the midpoint rule's integral of x^-alpha over the tail
    tail = math.log(b / a) if alpha == 1 else (b ** (1 - alpha) - a ** (1 - alpha)) / (1 - alpha)
    return float(head + tail)


@dataclass(frozen=True)
class KeySkew:
    """A table's key skew: Zipf ``alpha`` (0: uniform) and, from a sample, its hottest keys ``hot_keys`` (int64,
    hottest first) with their shares ``hot_shares`` of the lookups; ``source`` says where it came from."""
    alpha: float = 0.0
    hot_keys: tuple = ()
    hot_shares: tuple = ()
    source: str = "given"

    def __post_init__(self):
        self.validate()

    def validate(self):
        a = self.alpha
        if not (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) and a >= 0):
            raise ValueError(f"key skew: alpha={a!r}; use a Zipf exponent >= 0 (0: uniform; the synthetic data's "
                             "is 1.05)")
        if len(self.hot_keys) != len(self.hot_shares):
            raise ValueError(f"key skew: {len(self.hot_keys)} hot keys but {len(self.hot_shares)} shares; give one "
                             "share per key")
        s = np.asarray(self.hot_shares, np.float64)
        if s.size and (s.min() < 0 or s.sum() > 1 + 1e-9 or np.any(np.diff(s) > 0)):
            raise ValueError("key skew: hot_shares must be >= 0, hottest first, and add up to at most 1")
        return self

    # -- shares of the hottest keys -------------------------------------------------------------------------------
    def _zipf_top(self, h, rows):
        return zipf_norm(self.alpha, rows, h) / zipf_norm(self.alpha, rows) if h > 0 else 0.0

    def top_share(self, h, rows):
        """The share of lookups on the ``h`` hottest of ``rows`` keys: sampled where the sample reaches, then the
        Zipf law's for the keys beyond."""
        h = min(int(h), rows)
        k = min(len(self.hot_shares), h)
        sampled = float(sum(self.hot_shares[:k]))
        if h <= k:
            return sampled
        z_k = self._zipf_top(k, rows)
        more = (self._zipf_top(h, rows) - z_k) / (1 - z_k) if z_k < 1 else 0.0
        return sampled + (1 - sampled) * more

    def rank_share(self, i, rows):
        """The share of lookups on the key of rank ``i`` (from 1)."""
        return self.top_share(i, rows) - self.top_share(i - 1, rows)

    # -- distinct keys --------------------------------------------------------------------------------------------
    def unique_rows(self, n, rows):
        """The expected distinct keys among ``n`` lookups of a table of ``rows`` keys."""
        if n <= 0:
            return 0.0
        if self.alpha == 0:
            return rows * -math.expm1(n * math.log1p(-1 / rows)) if rows > 1 else 1.0
        norm = zipf_norm(self.alpha, rows)
        head = _head(self.alpha, min(rows, EXACT)) / norm
        total = -np.expm1(n * np.log1p(-head)).sum()
        if rows > EXACT:
            p, width = _tail_grid(self.alpha, EXACT, rows)
            total += (width * -np.expm1(n * np.log1p(-p / norm))).sum()
        return float(min(total, n, rows))

    # -- owners -----------------------------------------------------------------------------------------------------
    def owner_shares(self, rows, W, start=0, skip=0):
        """``[W]``: each hash residue's share of the table's lookups, the ``skip`` hottest keys left out (so the
        shares add up to ``1 - top_share(skip)``); see the module docstring."""
        shares = np.zeros(W)
        if self.hot_keys:
            keys = np.asarray(self.hot_keys[skip:], np.int64)
            np.add.at(shares, owner_hash(keys) % W, np.asarray(self.hot_shares[skip:], np.float64))
            known = self.top_share(max(len(self.hot_keys), skip), rows)
        else:
            ranked = min(rows, skip + RANKED)
            i = np.arange(skip + 1, ranked + 1, dtype=np.float64)  # the key of rank i on residue start + i - 1
            np.add.at(shares, (start + np.arange(skip, ranked)) % W, i ** -self.alpha / zipf_norm(self.alpha, rows))
            known = self.top_share(ranked, rows)
        return shares + (1 - known) / W

    # -- from a sample ----------------------------------------------------------------------------------------------
    @classmethod
    def from_sample(cls, keys, top=RANKED, fit_min_count=5):
        """The skew of a sample of a table's lookups ``keys`` (int64): its ``top`` hottest keys with their shares,
        and ``alpha`` fitted by least squares to log(count) against log(rank) over the keys seen at least
        ``fit_min_count`` times (0 when fewer than 3 are)."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        if keys.size == 0:
            raise ValueError("key skew: the sample holds no keys; sample rows that have this table's feature")
        values, counts = np.unique(keys, return_counts=True)
        order = np.lexsort((values, -counts))  # hottest first; ties by key, so a sample always gives one answer
        values, counts = values[order], counts[order]
        fit = counts[counts >= fit_min_count]
        alpha = 0.0
        if fit.size >= 3:
            slope = np.polyfit(np.log(np.arange(1, fit.size + 1)), np.log(fit), 1)[0]
            alpha = max(0.0, float(-slope))
        return cls(alpha, tuple(int(k) for k in values[:top]), tuple(float(c) / keys.size for c in counts[:top]),
                   f"a sample of {keys.size} lookups")
