"""Wire codecs: round trips within each codec's bound, the bytes a row costs on the wire (the planner's figure),
and the bytes an encoded all-to-all counts per direction."""
import numpy as np
import pytest

from gpuemb.autograd.backend import to_host
from gpuemb.comm import CommCodecs, Communicator, LocalCommunicator, WireCodec, alltoallv_encoded
from gpuemb.kernels.codecs import CODECS
from gpuemb.sharding.cost import vector_bytes


def _rows(rng, n, D):
    """Rows whose magnitudes span four decades, so only a per-row scale keeps every row within its bound."""
    return (rng.standard_normal((n, D)) * 10.0 ** rng.uniform(-2, 2, (n, 1))).astype(np.float32)


def _bound(codec, x):
    """The largest error each element of float32 rows ``x`` may have after a round trip in ``codec``."""
    if codec == "int8":
        return np.broadcast_to(np.abs(x).max(axis=1, keepdims=True) / 254 * (1 + 1e-5), x.shape)
    bound = {"fp32": 0.0, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}[codec] * np.abs(x)
    # float16 is subnormal below 2^-14, where its steps are 2^-24 whatever the value: half a step bounds the error
    return np.maximum(bound, 2.0 ** -25) if codec == "fp16" else bound


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n,D", [(1, 1), (37, 16), (8, 130)])
def test_round_trip_within_the_bound_at_the_planners_bytes_per_row(xp, rng, codec, n, D):
    x = _rows(rng, n, D)
    wire = WireCodec(codec).encode(xp.asarray(x))
    assert wire.shape[0] == n and wire.nbytes == n * vector_bytes(D, codec)
    back = to_host(WireCodec(codec).decode(wire))
    assert back.dtype == np.float32 and back.shape == (n, D)
    assert np.all(np.abs(back - x) <= _bound(codec, x))
    assert codec == "fp32" or D == 1 or np.any(back != x)  # it did round


@pytest.mark.parametrize("codec", CODECS)
def test_no_rows_encode_to_an_empty_wire(xp, codec):
    wire = WireCodec(codec).encode(xp.zeros((0, 9), np.float32))
    assert wire.shape[0] == 0 and WireCodec(codec).decode(wire).shape == (0, 9)


def test_int8_keeps_a_zero_row_zero_beside_a_large_one(rng):
    x = _rows(rng, 3, 12)
    x[1], x[2] = 0, x[2] * 1e6
    back = WireCodec("int8").decode(WireCodec("int8").encode(x))
    np.testing.assert_array_equal(back[1], 0)
    assert np.all(np.abs(back - x) <= _bound("int8", x))


def test_alltoallv_encoded_on_one_rank_decodes_what_it_sent(xp, rng):
    x = _rows(rng, 20, 8)
    got, counts = alltoallv_encoded(LocalCommunicator(), xp.asarray(x), [20], "int8")
    assert counts.tolist() == [20]
    assert np.all(np.abs(to_host(got) - x) <= _bound("int8", x))


class _Mirror(Communicator):
    """Rank 0 of 2 whose peer holds the same rows and counts: what it receives from each rank is its own part."""

    def __init__(self):
        super().__init__(0, 2)

    def _exchange(self, h, op):
        return np.stack([h, h])

    def _alltoallv(self, send, send_counts, recv_counts):
        return np.concatenate([send[:send_counts[0]]] * 2)


def test_each_direction_counts_its_own_codecs_bytes_to_other_ranks_only(rng):
    x, counts = _rows(rng, 10, 16), [3, 7]
    c, codecs = _Mirror(), CommCodecs(forward="int8", backward="bf16")
    fwd, fwd_counts = codecs.alltoallv_forward(c, x, counts)
    bwd, _ = codecs.alltoallv_backward(c, x, counts)
    assert fwd_counts.tolist() == [3, 3] and fwd.shape == bwd.shape == (6, 16)
    assert np.all(np.abs(fwd - np.concatenate([x[:3]] * 2)) <= _bound("int8", np.concatenate([x[:3]] * 2)))
    assert c.reset_bytes() == {"a2a_fwd": 7 * (16 + 4), "a2a_bwd": 7 * 16 * 2}


def test_bad_codecs_and_rows_are_refused():
    with pytest.raises(ValueError, match="codec 'int4' is unknown; use one of fp32, fp16, bf16, int8"):
        WireCodec("int4")
    with pytest.raises(ValueError, match="backward='fp8'"):
        CommCodecs(forward="int8", backward="fp8")
    with pytest.raises(TypeError, match="wants float32 rows"):
        WireCodec("fp16").encode(np.ones((2, 3)))
