"""Hot rows replicated: the hottest rows of a skewed table on every rank, the rest model-parallel (HugeCTR's hybrid
embedding). Estimated only: the runtime cannot run it yet, so a plan never holds it (docs/sharding.md).

A rank that looks a row up ``λ = b·L·p`` times a step (``p`` the row's share of the table's lookups) sends, for
the ``(W-1)/W`` of them owned elsewhere, a key and a gradient (``8 + v`` bytes, ``v = vector_bytes(dim, codec)``)
and gets a vector back (``v``). Replicated, the row's float32 gradient is allreduced instead: ``2·(W-1)/W·dim·4``
bytes a rank. So a row is worth replicating when

    λ · (8 + 2v) >= 8 · dim,    that is    p >= 8·dim / (b·L·(8 + 2v))

and, the shares falling with the rank, the hot set of a table is its ``h`` hottest rows above that bar: under
fp32 rows (``v = 4·dim``) a row a rank looks up about once a step. The rows cost every rank ``h·(row_bytes +
DEVICE_KEY_BYTES)`` of device memory; when the hot sets of all tables do not fit the least free rank, the bar is
raised (doubled) until they do.
"""
from dataclasses import dataclass

from .cost import DEVICE_KEY_BYTES, KEY_BYTES, rank_costs, row_bytes, vector_bytes
from .estimate import GRAD_BYTES

MAX_HOT_ROWS = 1 << 20  # per table: a search bound, far above any hot set a step's lookups justify


@dataclass(frozen=True)
class HotRows:
    """The ``rows`` hottest rows of table ``table``, taking a ``share`` of its lookups, replicated on every rank at
    ``memory`` device bytes a rank, their gradients allreduced (``allreduce`` bytes sent a rank)."""
    table: str
    rows: int
    share: float
    memory: float
    allreduce: float


def _bar(spec, b, codec):
    """The least share of a table's lookups that makes a row worth replicating (module docstring)."""
    v = vector_bytes(spec.dim, codec)
    return GRAD_BYTES * 2 * spec.dim / (b * spec.lookups_per_sample * (KEY_BYTES + 2 * v))


def _rows_over(skew, rows, bar):
    """How many of the hottest rows have a share of at least ``bar`` (shares fall with the rank: a binary
    search)."""
    lo, hi = 0, min(rows, MAX_HOT_ROWS)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if skew.rank_share(mid, rows) >= bar:
            lo = mid
        else:
            hi = mid - 1
    return lo


def choose_hot_rows(plan, skews):
    """``{table: HotRows}``: the hot set of each table- or row-wise table of ``plan`` with a skew in ``skews``
    (``{table: KeySkew}``) that has rows over the bar, within the least free rank's device memory."""
    W, b = plan.world_size, plan.batch_size / plan.world_size
    if W == 1:
        return {}  # one rank sends nothing: replicas save no traffic
    free = min(budget.device_bytes - c.memory.device for budget, c in zip(plan.budgets, rank_costs(plan)))
    tables = [p.table for p in plan.placements if p.kind in ("table", "row") and p.table.name in skews]
    raise_by = 1.0
    while True:
        chosen = {}
        for spec in tables:
            skew = skews[spec.name]
            h = _rows_over(skew, spec.rows, raise_by * _bar(spec, b, plan.codec))
            if h:
                chosen[spec.name] = HotRows(spec.name, h, skew.top_share(h, spec.rows),
                                            h * (row_bytes(spec) + DEVICE_KEY_BYTES),
                                            2 * (W - 1) / W * h * spec.dim * GRAD_BYTES)
        if sum(c.memory for c in chosen.values()) <= free:
            return chosen
        raise_by *= 2
