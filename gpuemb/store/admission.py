"""Admission: a key gets its own row only once it has been in ``admit_after`` batches (docs/store.md, "Admission").

Until then it is a pending key: an entry of a second ``KeyIndex`` whose int32 value is not a slot but the number
of batches the key has been in (the low 8 bits, so ``admit_after`` <= 255) and the table's update clock, modulo
2**23, when it was last counted (the 23 bits above), by which an eviction with ``ttl_steps`` drops the pending
keys not seen within it (``expire``): a drifting stream's keys seen once do not pile up. So a counted key costs
one index entry, 12 bytes at the index's load of 0.57 to 0.8 (15 to 21 bytes a key), and nothing else: no row,
no slot. A training lookup counts each of its keys once (they
are the batch's unique keys by then); the batch whose count reaches ``admit_after`` inserts the key's row, from
the initializer, and trains it. Before that the key reads the shared default row, zeros, and its gradient is
dropped. The pending index lives beside the home's, on the home's device, and a key the home holds is never
counted; a key that leaves the home (evicted, deleted, dropped past ``max_rows``) counts again from zero.
"""
import numpy as np

from gpuemb.autograd import backend
from gpuemb.autograd.backend import to_host

from .key_index import KeyIndex

COUNT_BITS = 8  # of a pending value: the count; the bits above hold the clock when last counted
SEEN_MOD = 1 << 23  # the last-seen clock is kept modulo this, and ages are computed modulo it (int32 values)


class Admission:
    """The pending keys of a table whose rows live in ``home`` (a ``HomeLevel``), admitted after ``after`` batches;
    ``life`` (a ``KeyLife``, which owns it) keeps the clock it stamps them with."""

    def __init__(self, after, home, life):
        self.after, self.home, self.life = after, home, life
        self.pending = KeyIndex(xp=home.xp)

    def __len__(self):
        return len(self.pending)

    @property
    def nbytes(self):
        return self.pending.nbytes

    def admit(self, unique, inverse):
        """``(keys, inverse)`` of a batch's ``unique`` keys (sorted, on the device) and their ``inverse`` [N]: the
        keys that have a row now, this batch's admissions among them, and each position's index into them, or
        ``len(keys)`` (the default row) for the keys still pending. Counts this batch once for each pending key."""
        home, xp = self.home, backend.xp
        here = home.here(unique)
        present = home.locate(here) >= 0
        admitted = backend.to_device(present | self._count(here, ~present))
        rank = xp.cumsum(admitted) - 1
        n = xp.count_nonzero(admitted)  # a device scalar: where() reads nothing back
        return unique[admitted], xp.where(admitted[inverse], rank[inverse], n)

    def _count(self, keys, absent):
        """One more batch for each of ``keys`` where ``absent``; the mask of those that reach ``after`` (forgotten
        here, as the caller inserts them)."""
        xp = self.home.xp
        reached = xp.zeros(keys.shape[0], np.bool_)
        at = xp.flatnonzero(absent)
        if at.shape[0]:
            counted = keys[at]
            pos, is_new = self.pending.claim(counted)
            counts = xp.where(is_new, 0, self.pending.values_at(pos) & ((1 << COUNT_BITS) - 1)) + 1
            self.pending.assign(pos, (counts | (self.life.clock % SEEN_MOD) << COUNT_BITS).astype(np.int32))
            done = counts >= self.after
            self.pending.erase(counted[done])
            reached[at] = done
        return reached

    @staticmethod
    def rows_only(n, positions, grads):
        """The ``positions`` [U] (among a batch's ``n`` admitted keys and the default row after them) and ``grads``
        of the admitted keys alone: the default row's gradient is dropped."""
        keep = positions < n
        return positions[keep], grads[keep]

    def counts(self, chunk=1 << 16):
        """``(keys, counts, seen)`` NumPy chunks of every pending key: its count and the clock, modulo
        ``SEEN_MOD``, when it was last counted."""
        for keys, values in self.pending.items(chunk):
            values = to_host(values).astype(np.int64)
            yield to_host(keys), values & ((1 << COUNT_BITS) - 1), values >> COUNT_BITS

    def set_counts(self, keys, counts, seen=None):
        """Set the counts and last-seen clocks of ``keys`` (restored from a snapshot; ``seen`` None: now), but of
        those the home holds."""
        home = self.home
        seen = np.full(len(keys), self.life.clock % SEEN_MOD) if seen is None else np.asarray(seen) % SEEN_MOD
        values = home.here((np.asarray(counts, np.int64) | seen.astype(np.int64) << COUNT_BITS).astype(np.int32))
        keys = home.here(np.asarray(keys, np.int64))
        absent = home.locate(keys) < 0
        pos, _ = self.pending.claim(keys[absent])
        self.pending.assign(pos, values[absent])

    def expire(self, ttl_steps, chunk=1 << 16):
        """Drop the pending keys not counted in the last ``ttl_steps`` update batches; returns how many."""
        clock, old = self.life.clock, []
        for keys, values in self.pending.items(chunk):
            age = (clock - (values >> COUNT_BITS)) % SEEN_MOD
            old.append(keys[age >= ttl_steps])
        old = self.home.xp.concatenate(old) if old else None
        if old is None or not old.shape[0]:
            return 0
        self.pending.erase(old)
        return old.shape[0]

    def forget(self, keys):
        """Drop the counts of ``keys`` (a delete); absent ones are ignored."""
        self.pending.erase(self.home.here(keys))
