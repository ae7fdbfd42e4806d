"""Eviction by a rule: which of a table's keys an ``EvictionRule`` drops (docs/store.md, "Eviction").

``EmbeddingTable.evict`` walks the home's index a chunk at a time and keeps the keys that every criterion of the
rule scores below its threshold (``EvictionRule.criteria``: each an eviction score of ``scores.py`` and a number).
A chunk reads only what the scores read: the age (the table's clock less the key's last update tick, kept by the
home only where the config asks), and the rows' steps and weights. The scores run on the home's device, so the only
copy back is the chunk's evicted keys, as it was before scores. Then it leaves out the keys whose rows a batch in
flight pins (between its lookup, or prefetch, and its update), which a later evict takes, and drops the rest from
every level.
"""
import numpy as np

from gpuemb.autograd.backend import to_host

from .scores import SCORES


def expired(table, rule, chunk=1 << 16):
    """The keys of ``table`` that meet every criterion of ``rule``, sorted (NumPy)."""
    home, reads = table.home, rule.reads()
    if "ages" in reads and home.touched is None:
        raise ValueError(f"{table.config.name}.evict: {_aged(rule)} needs each key's last update tick, which a table "
                         "keeps only when its config asks: give TableConfig(evict=) this rule, or track_updates=True")
    if reads & {"weights", "steps"}:
        table.top.flush()  # the steps and weights are read at the home: they must be the newest
    out = [np.zeros(0, np.int64)]
    for keys, slots in home.index.items(chunk):
        seen = {"weights": None, "steps": None, "ages": None}
        if reads & {"weights", "steps"}:
            rows, seen["steps"] = home.read(slots)
            seen["weights"] = table.format.weights(rows) if "weights" in reads else None
        if "ages" in reads:
            seen["ages"] = table.life.clock - home.touched[slots]
        hit = home.xp.ones(keys.shape[0], np.bool_)
        for name, below in rule.criteria():
            hit &= SCORES[name](keys, **seen) < below
        out.append(to_host(keys[hit]))
    return np.sort(np.concatenate(out))


def _aged(rule):
    """How an error names the criterion of ``rule`` that reads ages."""
    return f"ttl_steps={rule.ttl_steps}" if rule.ttl_steps is not None else f"score={rule.score!r}"


def unpinned(table, keys):
    """``keys`` (NumPy) less those whose rows a batch in flight pins at the table's top level."""
    top, in_flight = table.top, table.in_flight.pinned
    pins = getattr(top.policy, "pins", None)
    if pins is None:
        if in_flight:
            raise ValueError(f"{table.config.name}: {in_flight} rows are pinned by batches in flight, and this "
                             "table keeps no pins to tell which; delete between steps (no prefetch pending), or "
                             "give the table an evict rule (TableConfig(evict=EvictionRule(...))), which keeps them")
        return keys
    slots = top.locate(top.here(keys))
    pinned = (slots >= 0) & (pins[slots] > 0)  # an absent key reads the dump row, masked out
    return keys[~to_host(pinned)]
