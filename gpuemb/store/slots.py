"""Row slots of a device tier, handed out by a mask so that no count has to leave the device.

The store's levels on a ``DeviceTier`` take their slots from here, the host tiers from ``SlabAllocator``
(``slab.py``): both hand out the same ids for the same calls (freed rows last in, first out, then fresh rows in
order), so a table's slots do not depend on where it runs. The difference is who knows ``n``. A batch's new keys
are a mask on the device; ``alloc_where(mask)`` gives each of them a slot by its rank among them (a cumulative sum)
and keeps the free-stack top and the bump pointer as device scalars, so it never reads how many there are.

The tier must have rows for every slot handed out, which is a host decision (adding a slab). The host keeps an
upper bound of the bump pointer (``bump_bound``: it grows by the size of every mask) and only when that bound
passes the tier's capacity does the level read the true count (``settle``), once, with its other counters
(``RowLevel._settle``). So a table that is not within one batch of its allocated rows reads nothing.
"""
import numpy as np

from gpuemb.autograd.backend import to_host

from .errors import StoreFullError
from .slab import grown_to

MAX_SLOTS = 1 << 31  # the key index keeps int32 slots

class DeviceSlots:
    """Slots of ``tier`` (its rows live on the module ``xp``), handed out by masks and freed by masks."""

    def __init__(self, tier, xp):
        self.tier, self.xp = tier, xp
        self.stack = xp.zeros(1, np.int64)  # freed slots, last freed on top; one spare row so a gather stays valid
        self.state = xp.zeros(2, np.int64)  # [top of the stack, bump pointer], on the device
        self.bump_bound = 0  # host: the bump pointer is at most this
        self.top_bound = 0  # host: the free stack holds at most this many; it is sized by it, not by the capacity

    @property
    def n_used(self):
        """Slots in use: a read of the device counters (for stats and tests, not the hot path)."""
        top, bump = to_host(self.state).tolist()
        return bump - top

    @property
    def overhead_bytes(self):
        return self.stack.nbytes + self.state.nbytes

    def counters(self):
        """The device scalars the level reads when it settles: ``[top, bump]``."""
        return self.state

    def settle(self, top, bump, more):
        """Take the true ``top`` and ``bump`` (just read) and make room for ``more`` fresh slots at most."""
        self.bump_bound = bump
        if bump + more > MAX_SLOTS:  # checked here, on the host, so the index need not check device slots
            raise StoreFullError(f"DeviceSlots: {bump + more} rows would pass the {MAX_SLOTS} slots one level "
                                 "can index; shard the table over more ranks or split it into several tables")
        while self.tier.capacity < bump + more:
            self.tier.add_slab()
        self.top_bound = top

    def room_for(self, n):
        """Whether ``n`` more fresh slots surely fit in the tier's rows without a read."""
        return self.bump_bound + n <= self.tier.capacity

    def alloc_where(self, mask):
        """A fresh slot (int64) where ``mask`` is set, in rank order among the set ones; -1 elsewhere."""
        xp = self.xp
        rank = xp.cumsum(mask) - 1
        state = self.state.copy()  # CuPy's state[0] is a view, and state is written below
        top, bump = state[0], state[1]
        reuse = self.stack[xp.clip(top - 1 - rank, 0, self.stack.shape[0] - 1)]
        slots = xp.where(mask, xp.where(rank < top, reuse, bump + rank - top), -1)
        n = rank[-1:] + 1 if mask.shape[0] else xp.zeros(1, np.int64)
        k = xp.minimum(n, top)
        self.state[1:] = bump + n - k
        self.state[:1] = top - k
        self.bump_bound += mask.shape[0]
        return slots

    def free_where(self, slots, mask):
        """Push ``slots`` where ``mask`` is set onto the free stack, in order."""
        xp = self.xp
        self.top_bound += mask.shape[0]
        self.stack = grown_to(self.stack, self.top_bound + 1)
        rank = xp.cumsum(mask) - 1
        top = self.state.copy()[0]
        dump = self.stack.shape[0] - 1  # the spare row takes the writes of unset positions
        self.stack[xp.where(mask, top + rank, dump)] = xp.where(mask, slots, 0)
        if mask.shape[0]:
            self.state[:1] = top + rank[-1:] + 1

