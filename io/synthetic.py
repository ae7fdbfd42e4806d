"""Synthetic click data with a planted teacher, so that the best reachable AUC is known.

Rows are Criteo-shaped by default (13 dense, 26 categorical) or configured (dense count, cardinalities, ids per
table per row). For table t an id is drawn from a Zipf law of exponent ``alpha`` over ranks ``0..card-1``; a
fixed bijection of ``[0, card)`` then turns the rank into the id, so the hot ids are not simply the small ones.
The label comes from the teacher, a fixed random model with feature crosses:

    x      dense features, non-negative and skewed (Rayleigh), like the converter's log1p of counts
    v_0    = P x                              the dense features' embedding, dim k
    v_t    = s_t * sum of m(r) e_t(id)        per table, e_t(id) a random vector of dim k fixed by the seed,
                                              m(r) = (1 + r / decay_rank) ** -0.5 for the id of Zipf rank r
    logit  = b + a_lin * w.x / sd_lin + a_cross * sum_{i<j} v_i.v_j / sd_cross
    label  ~ Bernoulli(sigmoid(logit))

``sd_lin`` and ``sd_cross`` are measured on a calibration sample, so the logit's spread is ``logit_std`` and
``cross_share`` of its variance comes from the crosses; ``b`` is solved so that the mean CTR is ``base_ctr``.
Rare ids matter less (m(r)), as in real data, where a rare id's effect can hardly be learned: so a model
trained on a million rows can get close to the teacher. The teacher's AUC (its true probabilities scored
against the sampled labels) is the best any model can reach;
:func:`teacher_auc` measures it on a held-out split.

Every value of row i is a function of (seed, split, i) through a counter-based generator, so the data is the
same for any block size, thread count or order of generation, and any rows can be made on their own: that is
how :class:`SyntheticSource` feeds the loader on the fly, each rank making only the rows it trains on.
"""
import math
from dataclasses import asdict, dataclass

import numba
import numpy as np

from gpuemb.io.batch import Batch
from gpuemb.io.hashing import GOLDEN, mix, splitmix64
from gpuemb.io.output_folder import OutputFolder
from gpuemb.io.shards import ShardLayout, WriteOptions

CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SyntheticConfig:
    """The shape of the data and its teacher; the same config and seed always give the same rows."""
    n_dense: int = 13
    cardinalities: tuple = CRITEO_CARDINALITIES
    hotness: tuple = ()  # ids per table per row; () is one each
    alpha: float = 1.05  # Zipf exponent of the ids
    teacher_dim: int = 4  # k, the dim of the teacher's embeddings
    decay_rank: float = 50.0  # e_t(id) shrinks as (1 + rank / decay_rank) ** -0.5; 0 turns this off
    logit_std: float = 1.6
    cross_share: float = 0.7  # of the logit variance, the part from pairwise crosses
    base_ctr: float = 0.25
    seed: int = 0

    def validate(self):
        if self.n_dense < 0 or not self.cardinalities or min(self.cardinalities) < 1:
            raise ValueError(f"SyntheticConfig: n_dense={self.n_dense} must be >= 0 and cardinalities "
                             f"{self.cardinalities[:4]}... must be >= 1, at least one table")
        if self.hotness and (len(self.hotness) != len(self.cardinalities) or min(self.hotness) < 1):
            raise ValueError(f"SyntheticConfig: hotness={self.hotness} needs one value >= 1 per table "
                             f"({len(self.cardinalities)} tables), or () for one id each")
        if self.alpha <= 0 or self.teacher_dim < 1 or self.logit_std <= 0 or self.decay_rank < 0:
            raise ValueError("SyntheticConfig: alpha, teacher_dim and logit_std must be positive, "
                             "decay_rank >= 0")
        if not 0 <= self.cross_share <= 1 or not 0 < self.base_ctr < 1:
            raise ValueError(f"SyntheticConfig: cross_share={self.cross_share} must be in [0, 1] and "
                             f"base_ctr={self.base_ctr} in (0, 1)")
        return self

    @property
    def hot(self):
        return self.hotness or (1,) * len(self.cardinalities)

    def layout(self, meta=None):
        """The shard layout of this data: one label, I1.., C1.. columns."""
        return ShardLayout(("label",), tuple(f"I{j + 1}" for j in range(self.n_dense)),
                           tuple(f"C{t + 1}" for t in range(len(self.cardinalities))), self.hot, meta or {})


# MLPerf DLRM-DCNv2's multi-hot Criteo (the 1TB click logs): ids per row of each of the 26 features, and each
# table's rows in its reference (40M caps the five largest): 204M rows, 104 GB of fp32 at dim 128.
MLPERF_HOTNESS = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
MLPERF_CARDINALITIES = (40_000_000, 39_060, 17_295, 7_424, 20_265, 3, 7_122, 1_543, 63, 40_000_000, 3_067_956,
                        405_282, 10, 2_209, 11_938, 155, 4, 976, 14, 40_000_000, 40_000_000, 40_000_000, 590_152,
                        12_973, 108, 36)
# The cap on each of them for a run here: 7.1M rows, 3.4 GiB of dim-128 rows and as much again of exact Adagrad's
# state if every row were touched, within a 24 GiB host or a 78 GiB GPU beside the 16M dense weights.
MLPERF_CAP = 1_000_000

PRESETS = {
    "criteo": SyntheticConfig(),
    # Multi-hot with MLPerf's hotness over tables capped at 1,000 ids, like the quick default, so a CPU run meets
    # each id often enough to get close to the teacher.
    "multihot": SyntheticConfig(cardinalities=tuple(min(c, 1000) for c in CRITEO_CARDINALITIES),
                                hotness=MLPERF_HOTNESS),
    # MLPerf DLRM-DCNv2's data shape with each table capped at MLPERF_CAP rows (gpuemb.train.recipes has the run)
    "mlperf-dcnv2": SyntheticConfig(cardinalities=tuple(min(c, MLPERF_CAP) for c in MLPERF_CARDINALITIES),
                                    hotness=MLPERF_HOTNESS),
    # Moderate tables, so a DLRM sees each id often enough in ~1M rows to get close to the teacher on a CPU.
    "small": SyntheticConfig(cardinalities=tuple(min(c, 20_000) for c in CRITEO_CARDINALITIES)),
}


# Zipf by rejection-inversion (Hörmann and Derflinger 1996, as in Apache Commons RNG): exact, O(1) per draw.
@numba.njit(nogil=True, cache=True, inline="always")
def _helper1(x):
    return math.log1p(x) / x if abs(x) > 1e-8 else 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))


@numba.njit(nogil=True, cache=True, inline="always")
def _helper2(x):
    return math.expm1(x) / x if abs(x) > 1e-8 else 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))


@numba.njit(nogil=True, cache=True, inline="always")
def _h_integral(x, s):
    log_x = math.log(x)
    return _helper2((1.0 - s) * log_x) * log_x


@numba.njit(nogil=True, cache=True, inline="always")
def _h_integral_inverse(x, s):
    t = max(x * (1.0 - s), -1.0)
    return math.exp(_helper1(t) * x)


@numba.njit(nogil=True, cache=True, inline="always")
def _uniform(state):
    """(next state, a uniform in (0, 1)) of a splitmix64 stream."""
    state += GOLDEN
    return state, ((splitmix64(state) >> np.uint64(11)) + np.uint64(1)) * (1.0 / 9007199254740994.0)


def zipf_constants(n, s):
    """(h1, hn, cut): what rejection-inversion needs for ranks ``[0, n)`` and exponent ``s``."""
    h1 = _h_integral(1.5, s) - 1.0
    hn = _h_integral(n + 0.5, s)
    cut = 2.0 - _h_integral_inverse(_h_integral(2.5, s) - math.exp(-s * math.log(2.0)), s)
    return h1, hn, cut


@numba.njit(nogil=True, cache=True, inline="always")
def zipf_rank(state, n, s, h1, hn, cut):
    """(next state, a rank in [0, n) with P(r) proportional to (r + 1) ** -s); see :func:`zipf_constants`."""
    while True:
        state, u = _uniform(state)
        u = hn + u * (h1 - hn)
        x = _h_integral_inverse(u, s)
        k = min(max(int(x + 0.5), 1), n)
        if k - x <= cut or u >= _h_integral(k + 0.5, s) - math.exp(-s * math.log(k)):
            return state, k - 1


@numba.njit(nogil=True, cache=True, inline="always")
def _unit(key):
    """A value in [-sqrt(3), sqrt(3)] (variance 1) fixed by ``key``."""
    return ((splitmix64(key) >> np.uint64(11)) * (1.0 / 9007199254740992.0) - 0.5) * 3.4641016151377544


@numba.njit(nogil=True, cache=True, inline="always")
def _row(row, i, stream, cards, hot_off, alpha, zipf, decay, perm_a, perm_b, salts, scales, w, P, coef,
         label, dense, sparse, logit, v, total):
    """Row ``row`` of ``stream`` into row i of the outputs; v and total are scratch vectors of dim k."""
    k = P.shape[0]
    state = splitmix64(stream ^ splitmix64(np.uint64(row)))
    lin, squares = 0.0, 0.0
    total[:] = 0.0
    for j in range(dense.shape[1]):
        state, u = _uniform(state)
        x = 1.2 * math.sqrt(-2.0 * math.log(u))  # Rayleigh: non-negative and skewed, like log1p of counts
        dense[i, j] = x
        lin += w[j] * x
        for d in range(k):
            total[d] += P[d, j] * x
    for d in range(k):
        squares += total[d] * total[d]
    for t in range(cards.size):
        v[:] = 0.0
        for c in range(hot_off[t], hot_off[t + 1]):
            state, r = zipf_rank(state, cards[t], alpha, zipf[t, 0], zipf[t, 1], zipf[t, 2])
            idx = (r * perm_a[t] + perm_b[t]) % cards[t]
            sparse[i, c] = idx
            base = splitmix64(salts[t] ^ np.uint64(idx))
            m = scales[t] / math.sqrt(1.0 + r * decay)
            for d in range(k):
                v[d] += m * _unit(base + np.uint64(d))
        for d in range(k):
            total[d] += v[d]
            squares += v[d] * v[d]
    cross = 0.0
    for d in range(k):
        cross += total[d] * total[d]
    z = coef[0] + coef[1] * lin + coef[2] * 0.5 * (cross - squares)
    logit[i] = z
    state, u = _uniform(state)
    label[i] = 1.0 if u * (1.0 + math.exp(-z)) < 1.0 else 0.0


@numba.njit(nogil=True, cache=True, parallel=True)
def _generate(rows, stream, cards, hot_off, alpha, zipf, decay, perm_a, perm_b, salts, scales, w, P, coef,
              label, dense, sparse, logit):
    """Rows ``rows`` (their numbers, in any order) of ``stream`` into label/dense/sparse and their teacher logits.

    ``zipf[t]`` holds table t's :func:`zipf_constants`; ``decay`` is 1 / decay_rank (0: off); ``coef`` is
    (bias, linear coefficient, cross coefficient).
    """
    n_chunks = (label.size + 255) // 256
    for c in numba.prange(n_chunks):  # scratch vectors once per chunk of rows, not per row
        v, total = np.empty(P.shape[0]), np.empty(P.shape[0])
        for i in range(c * 256, min(c * 256 + 256, label.size)):
            _row(rows[i], i, stream, cards, hot_off, alpha, zipf, decay, perm_a, perm_b, salts, scales, w, P, coef,
                 label, dense, sparse, logit, v, total)


class _Teacher:
    """The fixed random parameters of a config's teacher, calibrated once."""

    def __init__(self, config):
        self.config = c = config.validate()
        rng = np.random.default_rng(c.seed)
        self.cards = np.array(c.cardinalities, np.int64)
        self.hot_off = np.concatenate([[0], np.cumsum(c.hot)]).astype(np.int64)
        self.perm_b = np.array([rng.integers(0, n) for n in c.cardinalities], np.int64)
        self.perm_a = np.array([self._coprime(rng, n) for n in c.cardinalities], np.int64)
        self.zipf = np.array([zipf_constants(n, c.alpha) for n in c.cardinalities])
        self.salts = rng.integers(0, np.iinfo(np.uint64).max, len(c.cardinalities), dtype=np.uint64, endpoint=True)
        # Tables differ in how much they matter; a multi-hot table's sum of h vectors is scaled back to unit size.
        self.scales = rng.uniform(0.5, 1.5, len(c.cardinalities)) / np.sqrt(c.hot)
        self.w = rng.normal(0.0, 1.0, c.n_dense)
        self.P = rng.normal(0.0, 1.0 / max(c.n_dense, 1) ** 0.5, (c.teacher_dim, c.n_dense))
        self.seed_key = np.uint64(splitmix64(np.uint64(c.seed)))  # numba hands back a Python int
        self.coef = np.array([0.0, 1.0, 0.0])
        _, lin = self.generate(0, 20_000, -1)
        self.coef = np.array([0.0, 0.0, 1.0])
        _, cross = self.generate(0, 20_000, -1)
        a_lin = c.logit_std * (1 - c.cross_share) ** 0.5 / max(lin.std(), 1e-12)
        a_cross = c.logit_std * c.cross_share ** 0.5 / max(cross.std(), 1e-12)
        z = a_lin * lin + a_cross * cross
        lo, hi = -40.0, 40.0
        for _ in range(60):  # bisection for the bias that gives the mean CTR
            b = 0.5 * (lo + hi)
            lo, hi = (b, hi) if np.mean(1.0 / (1.0 + np.exp(-(b + z)))) < c.base_ctr else (lo, b)
        self.coef = np.array([0.5 * (lo + hi), a_lin, a_cross])

    @staticmethod
    def _coprime(rng, n):
        while True:
            a = int(rng.integers(1, 1 << 31))
            if math.gcd(a, n) == 1:
                return a

    def generate(self, first, n, split):
        """(Batch, logits) of rows ``first..first+n`` of a split (its index in SPLITS; -1 is calibration)."""
        return self.generate_rows(np.arange(first, first + n, dtype=np.int64), split)

    def generate_rows(self, rows, split):
        """(Batch, logits) of the rows numbered ``rows``, in that order, of a split (as :meth:`generate`)."""
        c, n = self.config, rows.size
        batch = Batch(np.empty(n, np.float32), np.empty((n, c.n_dense), np.float32),
                      np.empty((n, int(self.hot_off[-1])), np.int64))
        logit = np.empty(n)
        stream = np.uint64(mix(self.seed_key, split + 2))
        decay = 1.0 / c.decay_rank if c.decay_rank else 0.0
        _generate(rows, stream, self.cards, self.hot_off, c.alpha, self.zipf, decay, self.perm_a, self.perm_b,
                  self.salts, self.scales, self.w, self.P, self.coef, *batch.arrays(), logit)
        return batch, logit


_TEACHERS = {}


def teacher(config):
    """The teacher of ``config`` (built and calibrated on first use, then kept)."""
    if config not in _TEACHERS:
        _TEACHERS[config] = _Teacher(config)
    return _TEACHERS[config]


def generate(config, first_row, n, split="train"):
    """(Batch, teacher logits ``[n]``) of rows ``first_row..first_row+n`` of ``split``."""
    return teacher(config).generate(first_row, n, SPLITS.index(split))


def auc(scores, labels):
    """ROC AUC of ``scores`` against 0/1 ``labels`` by ranks (Mann-Whitney), ties counted as one half."""
    scores, labels = np.asarray(scores), np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    sizes = np.diff(np.r_[starts, s.size])
    ranks = np.repeat(starts + (sizes + 1) / 2.0, sizes)  # average 1-based rank of each tie group
    n_pos = labels.sum()
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("auc: the labels are all one class; AUC needs positives and negatives")
    return float((ranks[labels[order]].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def teacher_auc(config, n_rows=1_000_000, split="test"):
    """The teacher's AUC on ``n_rows`` rows of ``split``: the best AUC a model can reach on this data."""
    batch, logit = generate(config, 0, n_rows, split)
    return auc(logit, batch.label)


class SyntheticSource:
    """``n_rows`` rows of ``split`` in blocks of ``block_rows``, each made when the loader asks for it."""

    def __init__(self, config, n_rows, split="train", block_rows=16384):
        if n_rows < 1 or block_rows < 1 or split not in SPLITS:
            raise ValueError(f"SyntheticSource: n_rows={n_rows} and block_rows={block_rows} must be >= 1 and "
                             f"split={split!r} one of {SPLITS}")
        self.config, self.split, self.block_rows, self.n_rows = config, split, block_rows, n_rows
        self.teacher = teacher(config)
        self.layout = config.layout()
        self.block_sizes = np.diff(np.r_[np.arange(0, n_rows, block_rows), n_rows]).astype(np.int64)

    def read_block(self, i):
        """Block ``i`` as a Batch."""
        return self.teacher.generate(i * self.block_rows, int(self.block_sizes[i]), SPLITS.index(self.split))[0]

    def read_rows(self, i, rows):
        """Rows ``rows`` of block ``i`` (indices in it, in any order) as a Batch, made alone: a rank makes its own."""
        return self.teacher.generate_rows(i * self.block_rows + np.asarray(rows, np.int64), SPLITS.index(self.split))[0]


def write_synthetic(config, out_dir, rows, options=WriteOptions(), block_rows=1 << 17, overwrite=False):
    """Write ``rows`` (a dict of split to row count) as shards under ``out_dir/<split>``, each split listed in its
    manifest; ``out_dir`` must hold no earlier conversion, unless ``overwrite`` (:mod:`gpuemb.io.output_folder`).

    Returns a dict of split to (shard paths, teacher AUC on that split's rows); the AUC is also in each shard's
    ``meta`` attribute.
    """
    with OutputFolder(out_dir, SPLITS, overwrite) as folder:
        return _write(config, folder, rows, options, block_rows)


def _write(config, folder, rows, options, block_rows):
    out = {}
    for split, n in rows.items():
        logits, labels = [], []
        # Every shard's meta holds the split's AUC, so it is measured first: the split is generated twice.
        for first in range(0, n, block_rows):
            batch, logit = generate(config, first, min(block_rows, n - first), split)
            logits.append(logit)
            labels.append(batch.label)
        split_auc = auc(np.concatenate(logits), np.concatenate(labels))
        meta = {"synthetic": asdict(config), "split": split, "teacher_auc": split_auc}
        writer = folder.shard_writer(split, config.layout(meta), options)
        for first in range(0, n, block_rows):
            writer.append(generate(config, first, min(block_rows, n - first), split)[0])
        out[split] = (writer.close(), split_auc)
        folder.publish(split, writer)
    return out
