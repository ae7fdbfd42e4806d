"""What an embedding table is and where it lives, as data: ``Initializer``, ``StoreOptions``, ``TableConfig``.

Each is a frozen dataclass that checks itself when made, so a bad setting fails at construction with a message
that names the field and what to use instead. ``TableConfig.to_dict()``/``from_dict()`` round-trip through plain
Python values, which is how snapshots record a table.
"""
import dataclasses
import math
from dataclasses import dataclass, field

from gpuemb import optim
from gpuemb.autograd.checks import check_int, fail
from gpuemb.optim.rule import RULES, UpdateRule, rule_class

from .rounding import ROUNDINGS
from .scores import SCORES

INIT_KINDS = ("uniform", "normal", "truncated_normal", "zeros")
PLACEMENTS = ("device", "host", "ssd")
POLICIES = ("lru", "lfu")
DRAWS = (1, 2)  # the streams of initial rows (init.py), oldest first: the last is the default
DTYPES = ("float32", "float16", "float64")
SHORT_DTYPES = {"fp32": "float32", "fp16": "float16"}  # how a run names the stored dtypes it offers


@dataclass(frozen=True)
class Initializer:
    """How a new key's weights are drawn: from (``seed``, key, column) only, whatever order keys arrive in.

    ``scale`` is the uniform bound or the normal std (the truncated normal is cut at 2 std); None means
    ``1/sqrt(dim)``. ``draw``: which stream of the generator (``init.py``): 2, four columns a Philox call, or 1,
    one, as gpuemb drew before 2026-11-28 (a run or bundle from then draws its new keys as it did only with 1).
    """
    kind: str = "uniform"
    scale: float = None
    seed: int = 0
    draw: int = DRAWS[-1]

    def __post_init__(self):
        if self.kind not in INIT_KINDS:
            fail("Initializer", f"kind={self.kind!r}; use one of {', '.join(INIT_KINDS)}")
        if self.scale is not None and not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale)
                                           and self.scale >= 0):
            fail("Initializer", f"scale={self.scale!r}; use a finite number >= 0, or None for 1/sqrt(dim)")
        check_int("Initializer", "seed", self.seed, 0)
        if self.seed >= 2 ** 64:
            fail("Initializer", f"seed={self.seed} does not fit in 64 bits; use a seed below 2**64")
        if type(self.draw) is not int or self.draw not in DRAWS:
            fail("Initializer", f"draw={self.draw!r}; use one of {', '.join(map(str, DRAWS))}")

    def scale_for(self, dim):
        return 1.0 / math.sqrt(dim) if self.scale is None else float(self.scale)


@dataclass(frozen=True)
class StoreOptions:
    """Where rows live and how they are cached.

    ``placement``: the home tier holding every row (device, host, or ssd at ``ssd_path``). ``cache_rows``: a
    device cache over a host or ssd home; ``host_cache_rows``: a host cache between it and an ssd home.
    ``policy``: what a full cache evicts. ``max_rows``: a bound on the table's keys; past it the least recently
    used keys are dropped instead of failing (device placement). ``slab_rows``/``chunk_rows``: the tiers' growth
    step and the SSD's chunk, which must divide it (see ``TierSpec``). ``ssd_threads``: the SSD tier's requests in
    flight (``ssd_tier.py``).
    """
    placement: str = "device"
    cache_rows: int = 0
    host_cache_rows: int = 0
    ssd_path: str = None
    policy: str = "lru"
    max_rows: int = None
    slab_rows: int = 1 << 16
    chunk_rows: int = 256
    ssd_threads: int = 16

    def __post_init__(self):
        owner = "StoreOptions"
        if self.placement not in PLACEMENTS:
            fail(owner, f"placement={self.placement!r}; use one of {', '.join(PLACEMENTS)}")
        if self.policy not in POLICIES:
            fail(owner, f"policy={self.policy!r}; use one of {', '.join(POLICIES)}")
        for name in ("cache_rows", "host_cache_rows"):
            check_int(owner, name, getattr(self, name), 0)
        check_int(owner, "max_rows", self.max_rows, 1, allow_none=True)
        check_int(owner, "slab_rows", self.slab_rows, 1)
        check_int(owner, "chunk_rows", self.chunk_rows, 1)
        check_int(owner, "ssd_threads", self.ssd_threads, 1)
        if self.placement == "ssd" and self.slab_rows % self.chunk_rows:
            fail(owner, f"chunk_rows={self.chunk_rows} must divide slab_rows={self.slab_rows}; powers of two fit")
        if self.placement == "device" and (self.cache_rows or self.host_cache_rows):
            name = "cache_rows" if self.cache_rows else "host_cache_rows"
            fail(owner, "cache_rows and host_cache_rows cache a host or ssd placement; with placement='device' "
                 "set them to 0, or choose placement='host' or 'ssd'", name)
        if self.placement != "device" and self.cache_rows < 1:
            fail(owner, f"placement={self.placement!r} computes on device rows: set cache_rows >= 1 (at least "
                 "the unique keys of one batch, e.g. 1000000)", "cache_rows")
        if self.host_cache_rows and self.placement != "ssd":
            fail(owner, "host_cache_rows caches an ssd placement; set it to 0 or choose placement='ssd'",
                 "host_cache_rows")
        if (self.placement == "ssd") != (self.ssd_path is not None):
            fail(owner, "ssd_path is the file of placement='ssd' and only of it; " + (
                "give an ssd_path" if self.placement == "ssd" else "drop ssd_path or set placement='ssd'"), "ssd_path")
        if self.max_rows is not None and self.placement != "device":
            fail(owner, "max_rows bounds a device placement; a host or ssd home grows, so drop max_rows", "max_rows")


@dataclass(frozen=True)
class EvictionRule:
    """Which keys ``EmbeddingTable.evict`` drops: those that meet every criterion given (docs/store.md, "Eviction").

    The general criterion is a score and a threshold: ``score`` names an eviction score (``scores.SCORES``: a
    function of a key's weights, update count and age that ranks it, higher kept), and the keys scoring below
    ``below`` are evicted. The others are settings of it (``criteria()``): ``ttl_steps``: not updated in the
    table's last ``ttl_steps`` update batches (its clock; needs the per-key tick that a table with this rule in its
    config keeps); ``min_count``: updated fewer than ``min_count`` times (the row's steps); ``max_l2``: the L2 norm
    of its weights is below ``max_l2``. So ``EvictionRule(ttl_steps=1000, min_count=5)`` drops stale keys that were
    seldom trained, and ``EvictionRule(max_l2=0.1)`` is ``EvictionRule(score="l2", below=0.1)``.
    """
    ttl_steps: int = None
    min_count: int = None
    max_l2: float = None
    score: str = None
    below: float = None

    def __post_init__(self):
        check_int("EvictionRule", "ttl_steps", self.ttl_steps, 1, allow_none=True)
        if self.ttl_steps is not None and self.ttl_steps >= 1 << 22:  # pending keys' ages are kept modulo 2**23
            fail("EvictionRule", f"ttl_steps={self.ttl_steps}; use fewer than 2**22 = {1 << 22} update batches",
                 "ttl_steps")
        check_int("EvictionRule", "min_count", self.min_count, 1, allow_none=True)
        if self.max_l2 is not None and not (_finite(self.max_l2) and self.max_l2 > 0):
            fail("EvictionRule", f"max_l2={self.max_l2!r}; use a finite number > 0, or None", "max_l2")
        if self.score is not None and self.score not in SCORES:
            fail("EvictionRule", f"score={self.score!r}; use one of {', '.join(SCORES)}, or register one "
                 "(gpuemb.store.scores.score)", "score")
        if (self.score is None) != (self.below is None):
            fail("EvictionRule", "score and below go together: keys whose score is below the threshold are evicted; "
                 "give both or neither", "below" if self.below is None else "score")
        if self.below is not None and not _finite(self.below):
            fail("EvictionRule", f"below={self.below!r}; use a finite number", "below")
        if not self.criteria():
            fail("EvictionRule", "no criterion given; set ttl_steps, min_count, max_l2, or score and below (a key "
                 "is evicted when it meets every one given)")

    def criteria(self):
        """``[(score name, threshold)]``: a key is evicted when each of these scores it below the threshold."""
        given = [("recency", None if self.ttl_steps is None else 1 - self.ttl_steps), ("count", self.min_count),
                 ("l2", self.max_l2), (self.score, self.below)]
        return [(name, below) for name, below in given if below is not None]

    def reads(self):
        """What the criteria read beside the keys (``scores.READS``)."""
        return {r for name, _ in self.criteria() for r in SCORES[name].reads}


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_it_ran(config):
    """A table's ``to_dict()`` as a snapshot saved it, with what a field newer than the snapshot ran as where its
    default now computes otherwise: an initializer with no ``draw`` drew as draw 1 (init.py)."""
    init = config.get("initializer")
    if isinstance(init, dict) and "draw" not in init:
        config = {**config, "initializer": {**init, "draw": DRAWS[0]}}
    return config


@dataclass(frozen=True)
class TableConfig:
    """One embedding table: its name, row width ``dim``, dtype, initializer, row update rule, lr and options.

    ``dtype``: how the weights are stored. float32 (the default) and float64 rows keep their optimizer state in
    the same dtype; ``"float16"`` stores the weights in float16 in every tier and snapshot, halving them, keeps
    the optimizer state float32, and computes lookups and updates in float32 (``row_format.py``). ``rounding``: how
    a float16 table rounds its updated weights, to nearest or stochastically from (``initializer.seed``, key, update
    count, column) (``rounding.py``); a restore may change it.

    The lifecycle of keys (docs/store.md, "Admission", "Eviction", "Deltas"): ``admit_after``: a key gets a row
    once it has been in that many batches (None or 1: at once). ``evict``: the ``EvictionRule`` of
    ``EmbeddingTable.evict()``, applied every ``evict_every`` update batches when that is given.
    ``track_updates``: keep each key's last update tick, for ``EmbeddingTable.delta`` (a ttl rule keeps it too).
    """
    name: str
    dim: int
    dtype: str = "float32"
    initializer: Initializer = field(default_factory=Initializer)
    rule: UpdateRule = field(default_factory=optim.SGDRule)
    lr: float = 0.01
    options: StoreOptions = field(default_factory=StoreOptions)
    admit_after: int = None
    evict: EvictionRule = None
    evict_every: int = None
    track_updates: bool = False
    rounding: str = "nearest"

    def __post_init__(self):
        owner = f"TableConfig({self.name!r})"
        check_int(owner, "admit_after", self.admit_after, 1, allow_none=True)
        if self.admit_after is not None and self.admit_after > 255:  # a pending key's count has 8 bits
            fail(owner, f"admit_after={self.admit_after}; use at most 255 batches", "admit_after")
        check_int(owner, "evict_every", self.evict_every, 1, allow_none=True)
        if self.evict is not None and not isinstance(self.evict, EvictionRule):
            fail(owner, f"evict={self.evict!r}; give an EvictionRule(ttl_steps=..., min_count=..., max_l2=...)",
                 "evict")
        if self.evict_every is not None and self.evict is None:
            fail(owner, "evict_every needs the rule to evict by; give evict=EvictionRule(...)", "evict_every")
        if not isinstance(self.track_updates, bool):
            fail(owner, f"track_updates={self.track_updates!r}; use True or False", "track_updates")
        if not isinstance(self.name, str) or not self.name:
            fail("TableConfig", f"name={self.name!r}; give the table a non-empty string name")
        check_int(owner, "dim", self.dim, 1)
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            fail(owner, f"dtype={self.dtype!r}; use one of {', '.join(DTYPES)} (float16 halves the stored weights)")
        if self.rounding not in ROUNDINGS:
            fail(owner, f"rounding={self.rounding!r}; use one of {', '.join(ROUNDINGS)}", "rounding")
        if self.rounding != "nearest" and self.dtype != "float16":
            fail(owner, f"rounding={self.rounding!r} rounds float16 weights; give dtype='float16' or "
                 "rounding='nearest'", "rounding")
        if not isinstance(self.rule, UpdateRule) or type(self.rule) not in RULES.values():
            fail(owner, f"rule={type(self.rule).__name__}; use a registered row rule, one of "
                  f"{', '.join(c.__name__ for c in RULES.values())} (gpuemb.optim.RULES)")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr >= 0):
            fail(owner, f"lr={self.lr!r}; use a finite number >= 0")

    def to_dict(self):
        """Plain Python values: what a snapshot stores."""
        return {"name": self.name, "dim": self.dim, "dtype": self.dtype, "rounding": self.rounding, "lr": self.lr,
                "initializer": dataclasses.asdict(self.initializer), "rule": self.rule.state_dict(),
                "options": dataclasses.asdict(self.options), "lifecycle": self.lifecycle()}

    def lifecycle(self):
        """The settings of keys' admission, eviction and tracking, as plain values; a restore may change them, as
        it may change ``options``."""
        return {"admit_after": self.admit_after, "evict_every": self.evict_every, "track_updates": self.track_updates,
                "evict": None if self.evict is None else dataclasses.asdict(self.evict)}

    @property
    def ticks(self):
        """Whether the table keeps each key's last update tick: for deltas, or to evict by age."""
        return self.track_updates or (self.evict is not None and "ages" in self.evict.reads())

    @classmethod
    def from_dict(cls, d):
        """The config that ``to_dict()`` described."""
        rule = dict(d["rule"])
        kind = rule_class(rule.pop("type"), "TableConfig.from_dict")
        life = dict(d.get("lifecycle") or {})  # snapshots before the lifecycle have none
        evict = life.pop("evict", None)
        return cls(name=d["name"], dim=int(d["dim"]), dtype=d["dtype"], rounding=d.get("rounding", "nearest"),
                   lr=float(d["lr"]),
                   initializer=Initializer(**as_it_ran(d)["initializer"]), rule=kind(**rule),
                   options=StoreOptions(**d["options"]), evict=None if evict is None else EvictionRule(**evict), **life)
