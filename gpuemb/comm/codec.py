"""Codecs on the wire: the embedding all-to-all in fp32, fp16, bf16 or int8 with a per-row scale.

A ``WireCodec`` turns float32 rows ``[n, D]`` into one array ``[n, w]`` that the all-to-all splits by rows, and
back. fp32, fp16 and bf16 (uint16 bits) ship the encoded rows as they are; int8 packs each row's D int8 values
and its float32 scale into ``D + 4`` bytes, so the scale travels with its row in the same message. Bytes per row:
fp32 ``4D``, fp16 and bf16 ``2D``, int8 ``D + 4``. Errors (``kernels/codecs.py``): fp16 and bf16 round to
nearest, relative error ``2^-11`` and ``2^-8``; int8 at most ``absmax / 254`` per element of a row.

``CommCodecs`` picks one codec per direction: the forward all-to-all of embeddings and the backward all-to-all of
their gradients, counted in ``comm.bytes_sent`` under ``a2a_fwd`` and ``a2a_bwd``.
"""
from dataclasses import dataclass

import numpy as np

from gpuemb.autograd.backend import get_array_module
from gpuemb.kernels import codecs

from .base import as_bytes

_SCALE_BYTES = 4  # int8's float32 scale, packed after the row


@dataclass(frozen=True)
class WireCodec:
    """The wire format ``name``, one of fp32, fp16, bf16, int8."""
    name: str

    def __post_init__(self):
        if self.name not in codecs.CODECS:
            raise ValueError(f"WireCodec: codec {self.name!r} is unknown; use one of {', '.join(codecs.CODECS)}")

    def encode(self, rows):
        """The wire array ``[n, w]`` of float32 ``rows [n, D]``."""
        if rows.dtype != np.float32 or rows.ndim != 2:
            raise TypeError(f"WireCodec({self.name!r}).encode: wants float32 rows [n, D], got {rows.dtype} "
                            f"of shape {rows.shape}")
        xp = get_array_module(rows)
        n, D = rows.shape
        if self.name != "int8":
            return codecs.encode(rows, self.name)[0]
        wire = xp.empty((n, D + _SCALE_BYTES), np.uint8)
        if n:  # the int8 kernels want at least one row
            q, scale = codecs.int8_encode(rows)
            wire[:, :D] = q.view(np.uint8)
            wire[:, D:] = as_bytes(scale).reshape(n, _SCALE_BYTES)
        return wire

    def decode(self, wire):
        """Float32 rows ``[n, D]`` from the wire array ``encode`` made (on any rank)."""
        if self.name != "int8":
            return codecs.decode((wire,), self.name)
        xp = get_array_module(wire)
        n, D = wire.shape[0], wire.shape[1] - _SCALE_BYTES
        if not n:
            return xp.empty((0, D), np.float32)
        # a copy, not ascontiguousarray: a single row's slice is already contiguous, at byte D of the row, and a
        # float32 view of it there is misaligned (CUDA_ERROR_MISALIGNED_ADDRESS on an H200, for any D % 4 != 0)
        scale = wire[:, D:].copy().view(np.float32).reshape(n)
        return codecs.int8_decode(xp.ascontiguousarray(wire[:, :D]).view(np.int8), scale)


def alltoallv_encoded(comm, rows, counts, codec, tag="alltoallv"):
    """``comm.alltoallv`` of float32 ``rows [n, D]`` under ``codec`` (a name or a ``WireCodec``): encoded
    before sending, decoded on arrival. Returns ``(float32 [m, D], recv_counts)``; the bytes count under ``tag``."""
    codec = codec if isinstance(codec, WireCodec) else WireCodec(codec)
    wire, recv_counts = comm.alltoallv(codec.encode(rows), counts, tag=tag)
    return codec.decode(wire), recv_counts


def start_encoded(comm, rows, counts, codec, tag="alltoallv"):
    """``alltoallv_encoded`` started on an overlapped communicator (``overlap.py``): the rows are encoded now, and
    ``.wait()`` of what it returns gives ``(float32 [m, D], recv_counts)`` once they have arrived."""
    codec = codec if isinstance(codec, WireCodec) else WireCodec(codec)
    return _Decoding(comm.start("alltoallv", codec.encode(rows), counts, tag), codec)


@dataclass(frozen=True)
class _Decoding:
    pending: object
    codec: WireCodec

    def wait(self):
        wire, recv_counts = self.pending.wait()
        return self.codec.decode(wire), recv_counts


@dataclass(frozen=True)
class CommCodecs:
    """The wire codec of each direction: ``forward`` for embeddings, ``backward`` for their gradients."""
    forward: str = "fp32"
    backward: str = "fp32"

    def __post_init__(self):
        for direction in ("forward", "backward"):
            if getattr(self, direction) not in codecs.CODECS:
                raise ValueError(f"CommCodecs: {direction}={getattr(self, direction)!r}; use one of "
                                 f"{', '.join(codecs.CODECS)}")

    def alltoallv_forward(self, comm, rows, counts):
        """The forward all-to-all of embedding rows, in the forward codec, counted under ``a2a_fwd``."""
        return alltoallv_encoded(comm, rows, counts, self.forward, tag="a2a_fwd")

    def start_forward(self, comm, rows, counts):
        """``alltoallv_forward`` started on an overlapped communicator; ``.wait()`` gives its result."""
        return start_encoded(comm, rows, counts, self.forward, tag="a2a_fwd")

    def alltoallv_backward(self, comm, grads, counts):
        """The backward all-to-all of embedding gradients, in the backward codec, counted under ``a2a_bwd``."""
        return alltoallv_encoded(comm, grads, counts, self.backward, tag="a2a_bwd")

    def start_backward(self, comm, grads, counts):
        """``alltoallv_backward`` started on an overlapped communicator; ``.wait()`` gives its result."""
        return start_encoded(comm, grads, counts, self.backward, tag="a2a_bwd")
