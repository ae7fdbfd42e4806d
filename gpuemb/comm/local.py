"""The local backend: one rank, so every collective returns a copy of its input (after the same checks)."""
from .base import Communicator


class LocalCommunicator(Communicator):
    """World size 1: what a single process sees, on either device."""

    name = "local"

    def __init__(self, timeout_s=None):
        super().__init__(0, 1, timeout_s)

    def _exchange(self, h, op):
        return h[None].copy()

    def _alltoallv(self, send, send_counts, recv_counts):
        return send.copy()

    def _allreduce(self, x, op):
        return x.copy()

    def _reduce_scatter(self, x, op):
        return x.copy()

    def _allgather(self, x, rows):
        return x.copy()

    def _broadcast(self, x, root):
        return x.copy()
