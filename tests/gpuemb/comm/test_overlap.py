"""Overlapped collectives (overlap.py): started in order on one thread, waited for later, errors at the wait; on a
modelled link only the time after the caller began to wait is exposed; the dense allreduce in buckets during the
backward gives the bits of the blocking one."""
import threading
import time

import numpy as np
import pytest

from gpuemb.autograd import Tensor
from gpuemb.comm import LocalCommunicator, ModelledCommunicator, OverlappedCommunicator
from gpuemb.comm.link import Link
from gpuemb.comm.modelled import ManualClock
from gpuemb.distributed.dense import GradientAllreduce

from .test_modelled import FourRanks


class Logged(LocalCommunicator):
    """A world of one that logs each collective's tag and thread, and fails on the tag "bad"."""

    def __init__(self):
        super().__init__()
        self.log = []

    def allreduce(self, x, op="sum", tag="allreduce"):
        time.sleep(0.002 * (tag == "first"))  # the first is slow: the second must still come after it
        self.log.append((tag, threading.current_thread().name))
        if tag == "bad":
            raise ValueError("a planted failure")
        return super().allreduce(x, op, tag)


def test_collectives_run_in_issue_order_on_one_thread_and_fail_at_the_wait(rng):
    inner = Logged()
    c = OverlappedCommunicator(inner)
    x = rng.standard_normal(5)
    first, second = c.start("allreduce", x, "sum", "first"), c.start("allreduce", 2 * x, "sum", "second")
    bad = c.start("allreduce", x, "sum", "bad")
    np.testing.assert_array_equal(second.wait(), 2 * x)
    np.testing.assert_array_equal(first.wait(), x)
    with pytest.raises(ValueError, match="a planted failure"):
        bad.wait()
    np.testing.assert_array_equal(c.allreduce(3 * x, tag="after"), 3 * x)  # a plain call: start and wait
    assert [t for t, _ in inner.log] == ["first", "second", "bad", "after"]
    assert {name for _, name in inner.log} == {"gpuemb-comm-0"}
    with pytest.raises(ValueError, match="no collective"):
        c.start("close")
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.start("allreduce", x)


def test_a_modelled_collective_is_exposed_only_from_when_its_caller_waited(rng):
    clock = ManualClock()
    m = ModelledCommunicator(FourRanks(clock, 0.0), Link("slow", 0.01, 1e12), clock)
    x = rng.standard_normal(8)
    m.reset_bytes()  # a step begins at 0
    with m.deferring() as spans:  # what the overlapped thread does: the span is kept back
        np.testing.assert_array_equal(m.allreduce(x), 4 * x)
    assert len(spans) == 1 and m.timeline() == []
    done = spans[0].done
    clock.advance(0.5)  # the caller computes past the collective's end, then waits: nothing exposed
    m.record_waited(spans, clock.now())
    clock.advance(0.1)
    m.reset_bytes()
    (hidden,) = m.timeline()
    assert hidden.exposed_comm_s == 0 and hidden.comm_s == pytest.approx(done)
    m.reset_bytes()  # a second step: the caller waits at once, as a blocking call does
    start = clock.now()
    with m.deferring() as spans:
        m.allreduce(x)
    m.record_waited(spans, start)
    m.reset_bytes()
    assert m.timeline()[-1].exposed_comm_s == pytest.approx(spans[0].done - start)
    assert spans[0].done - start >= 0.01  # the link's latency, all of it waited for


def layers(rng, widths, seed=None):
    g = np.random.default_rng(seed) if seed is not None else rng
    return [Tensor(g.standard_normal((a, b)).astype(np.float32), requires_grad=True)
            for a, b in zip(widths, widths[1:])]


def forward(ws, x):
    h = x
    for w in ws:
        h = (h @ w).relu()
    return h.sum()


def test_the_allreduce_in_buckets_during_the_backward_gives_the_blocking_ones_bits(rng):
    widths, x = [7, 6, 5, 4, 3], Tensor(rng.standard_normal((9, 7)).astype(np.float32))
    blocking, overlapped = layers(rng, widths, 1), layers(rng, widths, 1)
    plain = GradientAllreduce(blocking, FourRanks(ManualClock(), 0.0), bucket_bytes=130)
    forward(blocking, x).backward()
    plain()
    comm = OverlappedCommunicator(FourRanks(ManualClock(), 0.0))
    dense = GradientAllreduce(overlapped, comm, bucket_bytes=130)
    assert len(dense.buckets) >= 3
    started = []
    forward(overlapped, x).backward(on_ready=lambda leaf: (dense.ready(leaf), started.append(len(dense._started))))
    # buckets went while the backward still had leaves to finish, and all of them by its end
    assert started[-2] >= 1 and started[-1] == len(dense.buckets)
    assert sorted(dense._started) == list(range(len(dense.buckets)))
    dense()
    for a, b in zip(blocking, overlapped):
        np.testing.assert_array_equal(a.grad, b.grad)
    dense.ready(overlapped[0])  # a leaf of no bucket's: ignored by an unknown id, counted by a known one
    comm.close()
