"""A batch's rows in a table's top level, from the prefetch or lookup that pins them to the update or release that
gives the pins back: one handle a batch (``BatchRows``) with explicit states, and one owner of them (``InFlight``).

A training lookup pins its rows so that their slots stay valid until its backward updates them: a bounded level
never evicts a pinned row. The states of a batch, and the moves between them::

    prefetched ──> looked up ──> updated
        │              │ └─────> held ──> updated     (a loss scaler holds the update until the step's check)
        │              │           └────> released    (the step was skipped)
        └──────────────┴────────────────> released    (looked up by other keys, or its backward never comes)

``updated`` and ``released`` are final: a second backward, or one after a release, is a ``LeaseError``.

A lookup whose backward never comes (an external stack that decided to skip the step, a forward run only to look)
would keep its rows pinned for good, and a bounded level would end in ``StoreFullError``. So a looked-up batch is
released when the caller says so (``release(output)``), or when its output is garbage, since then nobody can call
its backward any more. Garbage collection may run on any thread, at any moment, even while that thread holds the
table's lock (which is not reentrant); so the collector only marks the batch released and queues it, and its pins
are given back at the table's next lock (``InFlight.settle``).

Three threads reach a table's batches: the step's (lookups, updates, releases), the pipeline's prefetch worker
(prefetches) and the collector. Every pin and unpin of a batch goes through ``InFlight``, under the table's lock;
the level below only counts the pins per slot, so that its eviction skips them (level.py).
"""
import weakref
from collections import deque

from gpuemb.autograd import backend
from gpuemb.autograd.function import _topological_order

MOVES = {"prefetched": ("looked up", "released"), "looked up": ("updated", "held", "released"),
         "held": ("updated", "released")}  # "updated" and "released" are final


class LeaseError(RuntimeError):
    """A backward for a lookup whose rows were already updated or released."""


class BatchRows:
    """One batch's rows pinned in a table's top level: its ``keys`` as given, their ``unique`` keys, each key's
    position among them (``inverse``), their ``tags`` (the table of each, in a store of several; else None) and
    their ``slots``; while ``held``, the update's ``positions`` and ``grads``."""

    def __init__(self, name, keys, unique, inverse, tags, slots, state):
        self.name, self.keys, self.unique, self.inverse = name, keys, unique, inverse
        self.tags, self.slots = tags, slots
        self.state, self.positions, self.grads = state, None, None

    def move(self, state):
        """Go to ``state``, or raise where that is no move from the state it is in."""
        if state not in MOVES.get(self.state, ()):
            if state in ("updated", "held") and self.state in ("updated", "released"):
                raise LeaseError(f"{self.name}: backward through a lookup whose rows were already {self.state}; run "
                                 "one backward per training lookup, and none after release()")
            raise LeaseError(f"{self.name}: a batch's rows cannot go from {self.state} to {state}")
        self.state = state


class InFlight:
    """The batches in flight of the table called ``name``, whose rows are pinned in its ``top`` level. The table
    holds its lock around every call, but ``let_go`` (the collector's, or an explicit release's)."""

    def __init__(self, name, top):
        self.name, self.top = name, top
        # Keys of the batches pinned, counted on the host so that room() and a delete need not wait for the device:
        # a row pinned by two batches counts twice, and a device batch counts its padding (N, not U: U stays there).
        self.pinned = 0
        self.prefetched = deque()  # oldest first: the next lookup takes the oldest over
        self.released = deque()  # let go without the table's lock: their pins go back at the next settle()
        self.held = None  # a list of batches while a loss scaler holds their updates (``hold``)

    def pin(self, keys, unique, inverse, tags, valid, state):
        """A batch in ``state`` whose ``unique`` keys' rows are brought into the top level and pinned; ``valid``: the
        fixed-size unique's mask of its distinct keys (``RowLevel.acquire``)."""
        slots = self.top.acquire(unique, tags, valid)
        self.pinned += unique.shape[0]
        batch = BatchRows(self.name, keys, unique, inverse, tags, slots, state)
        if state == "prefetched":
            self.prefetched.append(batch)
        return batch

    def look_up(self, keys, sort):
        """The batch of a training lookup of ``keys``: the oldest prefetch, where it was of these keys (sorted and
        pinned already); else a new batch of ``sort()``'s ``(unique, inverse, tags, valid)``, and the prefetch that
        was of other keys gives its pins back after the new batch has its rows, as it did before batches had states."""
        stale = self.prefetched.popleft() if self.prefetched else None
        if stale is not None and _same(stale.keys, keys):
            stale.move("looked up")
            return stale
        batch = self.pin(keys, *sort(), "looked up")
        if stale is not None:
            self.unpin(stale, "released")
        return batch

    def unpin(self, batch, state):
        """Give ``batch``'s pins back as it goes to ``state`` ("updated" or "released")."""
        batch.move(state)
        self._give_back(batch)

    def _give_back(self, batch):
        self.top.unpin(batch.slots)
        self.pinned -= batch.unique.shape[0]

    def backward(self, batch, positions, grads):
        """``batch``'s backward has come with the ``grads`` of its unique keys at ``positions``: True where its rows
        are to be updated now; False where a loss scaler holds the update (``hold``), the rows still pinned."""
        if self.held is None:
            if batch.state != "looked up":
                batch.move("updated")  # raises: only a looked-up batch updates
            return True
        batch.move("held")
        batch.positions, batch.grads = positions, grads
        self.held.append(batch)
        return False

    def hold(self):
        """Hold the updates of the coming backwards until ``drop_held`` or a ``take_held``; returns the list of held
        batches, whose ``grads`` a loss scaler unscales and checks in place. While it holds, a second call returns an
        empty list: a store of several tables holds once for them all."""
        if self.held is not None:
            return []
        self.held = []
        return self.held

    def take_held(self):
        """The held batches, oldest first; holding ends."""
        held, self.held = self.held or [], None
        return held

    def let_go(self, batch):
        """Release a looked-up ``batch`` whose backward will not come, from any thread, the table's lock held or not:
        its pins go back at the next ``settle``. Returns whether it was looked up."""
        if batch.state != "looked up":
            return False
        batch.move("released")
        self.released.append(batch)  # a deque: appending is atomic, no lock needed
        return True

    def settle(self):
        """Give back the pins of the batches let go since the last call."""
        while self.released:
            self._give_back(self.released.popleft())


def _same(a, b):
    """Whether two batches' keys are equal: the same array (a collection hands a prefetched batch's keys to its
    lookup), or else one read on the device (a prefetch's lookup pays it, no other)."""
    if a is b:
        return True
    if a.shape != b.shape:
        return False
    xp = backend.get_array_module(a, b)
    return bool(backend.item(xp.array_equal(a, b)))


def watch(fn, batch, table):
    """Attach ``batch`` to its lookup's Function ``fn``: ``release`` finds it there, and the collector lets it go
    when ``fn`` (so every tensor that could reach its backward) is garbage."""
    fn.batch, fn.table = batch, table
    weakref.finalize(fn, table.in_flight.let_go, batch)


def release(output):
    """Unpin the rows of every lookup that ``output`` (a Tensor) was computed from and whose backward has not run:
    for a forward whose backward will never come. Returns how many lookups it released; a backward through them
    afterwards raises ``LeaseError``."""
    fn = getattr(output, "creator", None)
    if fn is None:
        return 0
    released = 0
    for f in _topological_order(fn):
        batch = getattr(f, "batch", None)
        if batch is not None and f.table.in_flight.let_go(batch):
            f.table.settle_releases()
            released += 1
    return released
