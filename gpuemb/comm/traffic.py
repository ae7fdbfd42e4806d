"""What one rank's collective puts on the link: ``(messages, bytes)`` by the usual algorithm, for the link model.

W ranks; ``n`` the bytes of the array passed. The messages are those on the critical path of one rank, and the
bytes are the larger of what it sends and receives, since a full-duplex link moves both at once:

| op | algorithm | messages | bytes |
|---|---|---|---|
| every op, first | the header, an allgather (ring) of ``h = (8 + W) · 8`` bytes a rank | ``W-1`` | ``(W-1) h`` |
| alltoallv | one message to each peer | ``W-1`` | ``max(sent, received)``: the rows for, and from, the other ranks |
| allreduce | ring: reduce-scatter, then allgather | ``2 (W-1)`` | ``2 (W-1) n / W`` |
| reduce_scatter | ring | ``W-1`` | ``(W-1) n / W`` |
| allgather | ring | ``W-1`` | the other ranks' rows, ``(W-1) n`` for equal parts |
| broadcast | binomial tree | ``ceil(log2 W)`` | ``ceil(log2 W) n`` |
| barrier | the header alone | 0 | 0 |

A rank alone (W = 1) puts nothing on the link. Byte counts are whole bytes, rounded down as ``bytes_sent`` rounds.
"""
from .base import header

# The dense gradients' default bucket (distributed/dense.py, default_bucket_bytes): a quarter of them, at most 4 MiB
MAX_BUCKET_BYTES, BUCKET_PARTS = 4 << 20, 4


def bucket_bytes(total):
    """The default bucket of dense gradients of ``total`` bytes, one allreduce each: a quarter, at most 4 MiB."""
    return max(1, min(MAX_BUCKET_BYTES, -(-total // BUCKET_PARTS)))


def header_traffic(W):
    """The header every collective starts with: one ring allgather of the int64 header."""
    return W - 1, (W - 1) * header("barrier", None, W).nbytes


def alltoallv(W, sent, received):
    return W - 1, max(sent, received)


def allreduce(W, n):
    return 2 * (W - 1), 2 * (W - 1) * n // W


def reduce_scatter(W, n):
    return W - 1, (W - 1) * n // W


def allgather(W, others):
    return W - 1, others


def broadcast(W, n):
    hops = (W - 1).bit_length()  # ceil(log2 W): each round doubles the ranks that hold the data
    return hops, hops * n


def barrier(W):
    return 0, 0


def with_header(W, payload):
    """``payload`` (messages, bytes) plus the header's."""
    m, b = header_traffic(W)
    return payload[0] + m, payload[1] + b
