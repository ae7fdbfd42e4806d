"""The pins of one lookup, from the lookup until its backward, or until it is released.

A training lookup pins its rows in the table's top level so their slots stay valid until the backward updates
them. A lookup whose backward never comes (an external stack that decided to skip the step, a forward run only to
look) would keep them pinned for good, and a bounded level would end in ``StoreFullError``. So each lookup holds a
``Lease``: the backward takes it (once), and a lookup that is let go gives its pins back, either when the caller
says so (``release(output)``) or when its output is garbage, since then nobody can call its backward any more.

Garbage collection may run on any thread, at any moment, even while that thread holds the table's lock (which is
not reentrant). So a lease let go by the collector only queues its slots; the table unpins them the next time it
takes its lock (``EmbeddingTable._settle_releases``). An explicit ``release`` unpins at once.
"""
import weakref

from gpuemb.autograd.function import _topological_order


class LeaseError(RuntimeError):
    """A backward for a lookup whose rows were already updated or released."""


class Lease:
    """``slots`` pinned in ``table``'s top level by one lookup of the table called ``name``."""

    def __init__(self, table, slots):
        self.table, self.slots, self.state = table, slots, "pinned"

    def take(self):
        """The slots, for the backward that updates their rows and unpins them; a second take is an error."""
        if self.state != "pinned":
            raise LeaseError(f"{self.table.config.name}: backward through a lookup whose rows were already "
                             f"{self.state}; run one backward per training lookup, and none after release()")
        self.state = "updated"
        return self.slots

    def let_go(self, now):
        """Give the pins back if the backward has not taken them: at once (``now``; the caller holds no lock of
        the table) or at the table's next lock (from the garbage collector)."""
        if self.state != "pinned":
            return
        self.state = "released"
        self.table._released.append(self.slots)  # a deque: appending is atomic, no lock needed
        if now:
            self.table._settle_releases()


def hold(fn, lease):
    """Attach ``lease`` to the lookup's Function ``fn``: ``release`` finds it there, and the collector lets it go
    when ``fn`` (so every tensor that could reach its backward) is garbage."""
    fn.lease = lease
    weakref.finalize(fn, lease.let_go, False)


def release(output):
    """Unpin the rows of every lookup that ``output`` (a Tensor) was computed from and whose backward has not run:
    for a forward whose backward will never come. Returns how many lookups it released; a backward through them
    afterwards raises ``LeaseError``."""
    fn = getattr(output, "creator", None)
    if fn is None:
        return 0
    released = 0
    for f in _topological_order(fn):
        lease = getattr(f, "lease", None)
        if lease is not None and lease.state == "pinned":
            lease.let_go(True)
            released += 1
    return released
