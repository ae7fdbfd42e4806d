"""Eviction by a rule: which of a table's keys an ``EvictionRule`` drops (docs/store.md, "Eviction").

``EmbeddingTable.evict`` walks the home's index a chunk at a time and keeps the keys that meet every criterion of
the rule: age (the table's clock less the key's last update tick, kept by the home only where the config asks),
update count (the row's steps) and the L2 norm of its weights. Then it leaves out the keys whose rows a batch
in flight pins (between its lookup, or prefetch, and its update), which a later evict takes, and drops the rest
from every level.
"""
import numpy as np

from gpuemb.autograd.backend import to_host


def expired(table, rule, chunk=1 << 16):
    """The keys of ``table`` that meet every criterion of ``rule``, sorted (NumPy)."""
    home = table.home
    if rule.ttl_steps is not None and home.touched is None:
        raise ValueError(f"{table.config.name}.evict: ttl_steps={rule.ttl_steps} needs each key's last update "
                         "tick, which a table keeps only when its config asks: give TableConfig(evict="
                         "EvictionRule(ttl_steps=...)) or track_updates=True")
    if rule.min_count is not None or rule.max_l2 is not None:
        table.top.flush()  # the steps and weights are read at the home: they must be the newest
    out = [np.zeros(0, np.int64)]
    for keys, slots in home.index.items(chunk):
        xp = home.xp
        hit = xp.ones(keys.shape[0], np.bool_)
        if rule.ttl_steps is not None:
            hit &= home.clock - home.touched[slots] >= rule.ttl_steps
        if rule.min_count is not None or rule.max_l2 is not None:
            rows, steps = home.read(slots)
            if rule.min_count is not None:
                hit &= steps < rule.min_count
            if rule.max_l2 is not None:
                w = table.format.weights(rows).astype(np.float64)
                hit &= xp.sqrt((w * w).sum(1)) < rule.max_l2
        out.append(to_host(keys[hit]))
    return np.sort(np.concatenate(out))


def unpinned(table, keys):
    """``keys`` (NumPy) less those whose rows a batch in flight pins at the table's top level."""
    top = table.top
    pins = getattr(top.policy, "pins", None)
    if pins is None:
        if top.pins_held:
            raise ValueError(f"{table.config.name}: {top.pins_held} rows are pinned by batches in flight, and this "
                             "table keeps no pins to tell which; delete between steps (no prefetch pending), or "
                             "give the table an evict rule (TableConfig(evict=EvictionRule(...))), which keeps them")
        return keys
    slots = top.locate(top.here(keys))
    pinned = (slots >= 0) & (pins[slots] > 0)  # an absent key reads the dump row, masked out
    return keys[~to_host(pinned)]
