"""Eviction scores: what an ``EvictionRule`` ranks keys by (docs/store.md, "Eviction").

A score is a function ``score(keys, weights, steps, ages) -> [n]`` over a chunk of a table's keys: ``keys [n]``
int64, ``weights [n, D]`` in the table's compute dtype, ``steps [n]`` the rows' update counts and ``ages [n]`` the
update batches since each key's last update (0: updated in the last one). All are arrays of the home's device
(CuPy on a GPU, so a score is written once with ``xp = get_array_module(...)``), and those the score does not
read, by its ``reads``, are None: the table reads rows only for a score that asks, and keeps each key's last
update tick only where one reads ``ages``. A higher score is kept, as HKV's and dynamicemb's scores are: a rule
evicts the keys scoring below its threshold.

The built-in criteria of ``EvictionRule`` are settings of this: ``min_count=n`` evicts ``count`` below n,
``max_l2=x`` evicts ``l2`` below x, and ``ttl_steps=t`` evicts ``recency`` (minus the age) below ``1 - t``.
``@score("name", reads=...)`` registers another, which a rule and ``tools/train.py --evict-score`` then name.
"""
from gpuemb.autograd.backend import get_array_module
from gpuemb.autograd.registry import Registry

READS = ("weights", "steps", "ages")  # what a score may read beside the keys
SCORES = Registry("eviction score")


def score(name, reads):
    """Register the decorated function as the eviction score ``name``, reading ``reads`` (a subset of READS)."""
    bad = [r for r in reads if r not in READS]
    if bad or not reads:
        raise ValueError(f"eviction score {name!r}: reads={tuple(reads)!r}; name one or more of {', '.join(READS)}")

    def register(fn):
        fn.reads = tuple(reads)
        return SCORES.add(name, fn)
    return register


@score("l2", reads=("weights",))
def l2(keys, weights, steps, ages):
    """The L2 norm of the weights, in float64: small rows add little to a prediction."""
    w = weights.astype("float64")
    return get_array_module(w).sqrt((w * w).sum(1))


@score("count", reads=("steps",))
def count(keys, weights, steps, ages):
    """How many times the row was updated: rarely seen keys are noise."""
    return steps


@score("recency", reads=("ages",))
def recency(keys, weights, steps, ages):
    """Minus the update batches since the key's last update: stale keys score low."""
    return -ages
