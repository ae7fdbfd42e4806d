"""When a sharded lookup's backward applies its row updates: at once, or once its gradients' all-to-all is done.

A lookup's backward sends each gradient row to the row's owner (one all-to-all per width group), then each owner
runs its tables' row rule on what it received (``exchange.py``). On a blocking communicator the all-to-all has
returned by then, and the updates run at once (``RowUpdates``). On an overlapped one (``comm/overlap.py``) the
all-to-all is only started in the backward, which runs before the bottom MLP's (``Function.early_backward``), and
the updates wait in ``HeldRowUpdates`` until ``settle()``: the training step's end (``Cluster.settle``), or the
collection's next forward, which must read the updated rows. The gradients then travel during the rest of the
backward, the dense allreduce and the dense optimizer, none of which reads a row.

Every rank settles at the same point of its program, so the collectives that the updates make (column-wise
Adagrad's sums, the data-parallel tables' gathers) keep one order on every rank. The updates run in the order the
backwards ran, on the same gradients, so the rows are the blocking run's bits.
"""


class RowUpdates:
    """A blocking communicator's: each update runs as it is added."""

    def add(self, update):
        update()

    def settle(self):
        pass


class HeldRowUpdates:
    """An overlapped communicator's: updates wait, in order, until ``settle()`` runs them."""

    def __init__(self):
        self._held = []

    def add(self, update):
        self._held.append(update)

    def settle(self):
        held, self._held = self._held, []  # an update that raises (a rank died) drops the rest: the step is lost
        for update in held:
            update()


def row_updates_for(comm):
    """``HeldRowUpdates`` where ``comm`` can start a collective and wait later, else ``RowUpdates``."""
    return HeldRowUpdates() if hasattr(comm, "start") else RowUpdates()
