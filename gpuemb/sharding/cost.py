"""The cost model: the bytes a shard takes in each tier, and the bytes each rank moves per training step.

Memory follows the store (``gpuemb.store``), per key of a level:

- the row as the store keeps it (``store/row_format.py``: float16 weights beside float32 state in a float16
  table), in the level's tier;
- ``INDEX_BYTES`` for the key index, in the same memory as the index: the device for a device level, the host
  for a host or ssd home. By its own account (``store/key_index.py``) the index costs 15 to 21 bytes a key
  between rehashes; we charge 24, a bound with room;
- per-slot bookkeeping, which ``RowLevel`` keeps beside its rows, in the level's memory, only what the level reads
  (docs/store.md, "Bytes a key"). A bounded level (a device cache) keeps ``SLOT_BYTES``: the key (8), update
  count (4), dirty flag (1), the policy's last use, use count and pins (4 + 4 + 4) and occupied flag (1), on the
  device (with one spare row, and two small counters), so it is charged to the device: ``DEVICE_KEY_BYTES`` a key
  beside its row. A device home is charged the same: without ``max_rows`` it keeps only the update count, but a
  config may bound it (then it keeps all but the dirty flag), and the plan does not know. A host or ssd home never
  evicts, so it keeps no key, dirty flag or policy state: a host home keeps the update count (``STEP_BYTES``) and
  the slab allocator's used flag (``USED_FLAG_BYTES``, 1), an ssd home only the used flag, its update counts being
  in the file beside each row (``STEP_BYTES`` of ssd a key). Those arrays grow by a quarter ahead, so up to 1.25
  times these bytes right after a growth; they are ``host_meta``: reported, not charged to the host tier, whose
  budget is for rows. Not counted: a level's free stack (8 bytes per freed row, on the level's device), and slab
  rounding: a tier grows ``slab_rows`` rows at a time (65536 by default), and a device level keeps room for a
  batch ahead, so a shard may take up to a slab more; give small tables a small ``slab_rows``.

Traffic per step, for a global batch of ``B`` samples over ``W`` ranks (``b = B / W`` each) and a table with
``L`` lookups per sample: a shard that gets a share ``q`` of the table's keys (1 table- and column-wise, ``1/W``
row-wise) sees ``U = min(B·L·q, rows)`` unique rows, an upper bound (duplicates in a batch are read once). Its
owner reads their weights in the forward and reads and writes their whole rows in the update: ``U·(cols +
2·width)·itemsize`` lookup bytes. Every other rank sends it its keys (8 bytes each, ``b·L·q`` of them), and for
bags of several keys (pooled, ``L > 1``) the length of each sub-bag it holds keys of (``LENGTH_BYTES``, an int64);
the owner sends back one vector per bag that has a key in the shard (``min(b·L·q, b·(1 − (1 − q)^L))``; one per
key when unpooled) and gets their gradients back, ``cols·codec + scale`` bytes each. A pooled table of one lookup
a sample may be single keys or bags of one key, which the plan cannot tell apart; it is priced as single keys,
without lengths. A data-parallel table is read locally and allreduced as a dense gradient,
``2·(W − 1)/W · rows·dim·itemsize`` bytes sent per rank by a ring. Comm bytes are the bytes a rank sends; what it
keeps for itself never leaves it.
"""
from dataclasses import dataclass, fields

from gpuemb import optim
from gpuemb.store.row_format import RowFormat

INDEX_BYTES = 24
STEP_BYTES = 4
SLOT_BYTES = 8 + STEP_BYTES + 1 + 4 + 4 + 4 + 1
USED_FLAG_BYTES = 1
HOME_META_BYTES = {"device": 0, "host": STEP_BYTES + USED_FLAG_BYTES, "ssd": USED_FLAG_BYTES}
DEVICE_KEY_BYTES = INDEX_BYTES + SLOT_BYTES  # a device level's bytes a key, beside its row
KEY_BYTES = 8
LENGTH_BYTES = 8  # a sub-bag's length, int64, beside its keys (distributed/bag_routing.py)
RECIPE_BYTES = 8  # a relayed sub-bag's recipe: its bag's place, an int64 (distributed/host_relay.py)
CODEC_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
SCALE_BYTES = {"int8": 4}  # int8 sends a float32 absmax scale beside each row
HOMES = ("device", "host", "ssd")


class _Sum:
    """Field-wise ``+`` for the cost dataclasses below."""

    def __add__(self, other):
        return type(self)(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class Memory(_Sum):
    """Bytes per tier; ``host_meta`` is the host levels' bookkeeping of their rows."""
    device: float = 0
    host: float = 0
    ssd: float = 0
    host_meta: float = 0

    def __sub__(self, other):
        return type(self)(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def fits(self, free):
        """Whether these bytes fit in ``free`` tier by tier (``host_meta`` is not a tier)."""
        return self.device <= free.device and self.host <= free.host and self.ssd <= free.ssd

    @property
    def total(self):
        return self.device + self.host + self.ssd


@dataclass(frozen=True)
class RankCost(_Sum):
    """One rank's memory and its bytes per step: ``lookup`` in its store, ``a2a_fwd``/``a2a_bwd`` sent in the
    embedding all-to-alls, ``allreduce`` sent for data-parallel tables; ``shards`` it holds."""
    memory: Memory = Memory()
    lookup: float = 0
    a2a_fwd: float = 0
    a2a_bwd: float = 0
    allreduce: float = 0
    shards: int = 0

    @property
    def load(self):
        """Bytes this rank moves per step: what the planner balances."""
        return self.lookup + self.a2a_fwd + self.a2a_bwd + self.allreduce


def human_bytes(n):
    """Bytes in decimal units (B, KB, MB, GB, TB), for messages."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def row_bytes(spec, cols=None):
    """Bytes of one stored row of ``spec`` holding ``cols`` weight columns (all by default) and their state.

    As the store keeps it (``store/row_format.py``): a float16 table's weights are float16 and its optimizer state
    float32, so its rows are not half of a float32 table's."""
    rule = optim.rule_class(spec.rule, "row_bytes")()
    return RowFormat(rule, spec.dim if cols is None else cols, spec.dtype).row_bytes


def shard_memory(spec, rows, cols=None, home="device", cache_rows=0):
    """Bytes of ``rows`` keys of ``spec`` (``cols`` columns) homed in ``home``, under a device cache of
    ``cache_rows`` where the home is host or ssd."""
    if home not in HOMES:
        raise ValueError(f"shard_memory: home={home!r}; use one of {', '.join(HOMES)}")
    rb = row_bytes(spec, cols)
    on_device = rows if home == "device" else cache_rows
    return Memory(device=on_device * (rb + DEVICE_KEY_BYTES),
                  host={"device": 0, "host": rows * (rb + INDEX_BYTES), "ssd": rows * INDEX_BYTES}[home],
                  ssd=rows * (rb + STEP_BYTES) if home == "ssd" else 0,
                  host_meta=rows * HOME_META_BYTES[home])


def activation_bytes(batch_size, widths, itemsize=4):
    """Bytes of a step's activations on one rank, an estimate: every layer's output ``[b, width]`` for its
    ``batch_size`` rows ``b`` (the embeddings of a sample side by side count as one layer of their total width),
    kept from the forward for the backward, and a gradient of the same size in the backward: ``2·b·Σ widths·
    itemsize``. A model's own intermediates (an interaction's pairs, a cross's products) are not counted."""
    return 2 * batch_size * sum(widths) * itemsize


def vector_bytes(cols, codec):
    """Wire bytes of one row of ``cols`` elements in ``codec``."""
    if codec not in CODEC_BYTES:
        raise ValueError(f"codec={codec!r}; use one of {', '.join(CODEC_BYTES)}")
    return cols * CODEC_BYTES[codec] + SCALE_BYTES.get(codec, 0)


def single_keys(spec):
    """Whether ``spec`` is priced as single keys: unpooled, or pooled of one lookup a sample, which may be single
    keys or bags of one key (the plan cannot tell)."""
    return spec.pooling is None or spec.lookups_per_sample <= 1


def length_bytes(spec):
    """The bytes a sub-bag's length adds to its keys on the wire: bags of several keys carry one; single keys
    (``single_keys``) none."""
    return 0 if single_keys(spec) else LENGTH_BYTES


def unique_rows(spec, share, rows, batch_size):
    """Rows a shard holding ``rows`` keys and a ``share`` of the table's keys touches per step, at most."""
    return min(batch_size * spec.lookups_per_sample * share, rows)


def placement_costs(placement, world_size, batch_size, codec):
    """The ``RankCost`` of one placement on each of ``world_size`` ranks (a list)."""
    spec, W, B = placement.table, world_size, batch_size
    L, s, b = spec.lookups_per_sample, spec.itemsize, batch_size / world_size
    costs = [RankCost() for _ in range(W)]
    q = 1 / len(placement.shards) if placement.kind == "row" else 1.0
    for shard in placement.shards:
        d = shard.cols[1] - shard.cols[0]
        mem = shard_memory(spec, shard.rows, d, shard.home, shard.cache_rows)
        costs[shard.rank] += RankCost(memory=mem, shards=1)
        rb = row_bytes(spec, d)
        if placement.kind == "data":  # every replica reads its own batch and applies the global update
            costs[shard.rank] += RankCost(
                lookup=min(b * L, shard.rows) * d * s + unique_rows(spec, 1.0, shard.rows, B) * 2 * rb,
                allreduce=2 * (W - 1) / W * shard.rows * d * s)
            continue
        costs[shard.rank] += RankCost(lookup=unique_rows(spec, q, shard.rows, B) * (d * s + 2 * rb))
        keys = b * L * q
        vectors = keys if spec.pooling is None else min(keys, b * (1 - (1 - q) ** L))
        v = vectors * vector_bytes(d, codec)
        for r in range(W):
            if r != shard.rank:
                costs[r] += RankCost(a2a_fwd=keys * KEY_BYTES + vectors * length_bytes(spec), a2a_bwd=v)
                costs[shard.rank] += RankCost(a2a_fwd=v)
    return costs


def rank_costs(plan):
    """The summed ``RankCost`` of every placement of ``plan``, per rank (a 2-D placement, ``table_row`` or
    ``grid``, as the row-wise parts of its column ranges, and in a plan of several hosts the pooled bags of keyed
    placements as the two-level exchange sends them: ``hierarchical.costs_on_hosts``)."""
    from .hierarchical import costs_on_hosts, relay_hosts  # they build on this module's costs
    totals, hosts = [RankCost() for _ in range(plan.world_size)], relay_hosts(plan.local_ranks, plan.world_size)
    for placement in plan.placements:
        costs = costs_on_hosts(placement, plan.world_size, plan.batch_size, plan.codec, hosts)
        totals = [t + c for t, c in zip(totals, costs)]
    return totals

