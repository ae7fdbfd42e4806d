"""The communicator with a modelled link (modelled.py) on a manual clock: its results are the wrapped backend's,
each collective's modelled time is its algorithm's messages and bytes over the link, the wait happens, and the
timeline splits each step into compute, communication and exposed communication."""
import json

import numpy as np
import pytest

from gpuemb import comm
from gpuemb.autograd.backend import to_host
from gpuemb.comm import Communicator, LocalCommunicator, ModelledCommunicator
from gpuemb.comm.link import PRESETS, Link
from gpuemb.comm.modelled import ManualClock, WallClock
from gpuemb.comm.timeline import Span, Step

LINK = Link("test", 1e-6, 1e9)
HEADER = 3, 3 * (8 + 4) * 8  # 4 ranks: the header's ring allgather, 3 messages of 96 bytes


class FourRanks(Communicator):
    """Rank 0 of 4 imagined ranks that each pass what this one passes; its transport takes ``real_s`` on ``clock``."""

    name = "four"

    def __init__(self, clock, real_s):
        super().__init__(0, 4)
        self.clock, self.real_s = clock, real_s

    def _exchange(self, h, op):
        return np.tile(h, (4, 1))

    def _moved(self, out):
        self.clock.advance(self.real_s)
        return out

    def _alltoallv(self, send, send_counts, recv_counts):
        return self._moved(np.concatenate([send[:send_counts[0]]] * 4))

    def _allreduce(self, x, op):
        return self._moved(4 * x)

    def _reduce_scatter(self, x, op):
        return self._moved(4 * x[:len(x) // 4])

    def _allgather(self, x, rows):
        return self._moved(np.concatenate([x] * 4))

    def _broadcast(self, x, root):
        return self._moved(x.copy())


def every_op(c, rng):
    """Each collective of ``c`` on fresh float32 rows ``[8, 5]`` (160 bytes, 20 a row); their results in order."""
    x = rng.standard_normal((8, 5)).astype(np.float32)
    counts = np.array([2, 3, 1, 2][:c.world_size] if c.world_size == 4 else [8])
    return [*c.alltoallv(x, counts), c.allreduce(x), c.reduce_scatter(x), c.allgather(x), c.broadcast(x), c.barrier()]


def test_results_are_the_wrapped_local_backends(xp, rng):
    c = ModelledCommunicator(LocalCommunicator(), PRESETS["ib100"], ManualClock())
    x = xp.asarray(rng.standard_normal((6, 3)).astype(np.float32))
    for ours, theirs in [(c.alltoallv(x, [6]), c.inner.alltoallv(x, [6])),
                         (c.allreduce(x, "max"), c.inner.allreduce(x, "max")),
                         (c.reduce_scatter(x), c.inner.reduce_scatter(x)), (c.allgather(x), c.inner.allgather(x)),
                         (c.broadcast(x), c.inner.broadcast(x))]:
        for a, b in zip(ours, theirs) if isinstance(ours, tuple) else [(ours, theirs)]:
            assert type(a) is type(b)
            np.testing.assert_array_equal(to_host(a), to_host(b))
    assert c.reset_bytes() == {"alltoallv": 0, "allreduce": 0, "reduce_scatter": 0, "allgather": 0, "broadcast": 0}


def test_a_single_rank_puts_nothing_on_the_link(rng):
    clock = ManualClock()
    c = ModelledCommunicator(LocalCommunicator(), PRESETS["nvlink4"], clock)
    c.reset_bytes()
    every_op(c, rng)
    c.reset_bytes()
    spans = c.timeline()[0].spans
    assert [s.op for s in spans] == ["alltoallv", "allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"]
    assert all(s.messages == 0 and s.nbytes == 0 and s.modelled_s == 0 for s in spans)


@pytest.mark.parametrize("real_s", [0.0, 1.0])  # the link slower than the transport, then faster
def test_each_collective_waits_out_its_algorithms_messages_and_bytes(real_s, rng):
    clock = ManualClock(5.0)
    c = ModelledCommunicator(FourRanks(clock, real_s), LINK, clock)
    c.reset_bytes()
    results = every_op(c, rng)
    c.reset_bytes()
    spans = c.timeline()[0].spans
    # messages and bytes by hand, the header's first: the tables of traffic.py at W = 4 and n = 160 bytes
    payload = {"alltoallv": (3, max((8 - 2) * 20, 3 * 2 * 20)),  # 6 rows sent, 2 rows from each of 3 peers
               "allreduce": (6, 2 * 3 * 160 // 4), "reduce_scatter": (3, 3 * 160 // 4), "allgather": (3, 3 * 160),
               "broadcast": (2, 2 * 160), "barrier": (0, 0)}
    for s in spans:
        m, b = payload[s.op][0] + HEADER[0], payload[s.op][1] + HEADER[1]
        assert (s.messages, s.nbytes) == (m, b), s
        assert s.modelled_s == m * 1e-6 + b / 1e9, s
        assert s.waited == s.issued and s.returned == s.issued + (real_s if s.op != "barrier" else 0)
        assert s.done == max(s.returned, s.issued + s.modelled_s)  # the wait, on the manual clock
    assert clock.waits == [s.issued + s.modelled_s for s in spans]
    np.testing.assert_array_equal(results[2], 4 * results[5])  # the allreduce: the 4 ranks' sum


@pytest.mark.parametrize("local", [Link("slow", 1e-6, 1e7), Link("fast", 1e-6, 1e11)])
def test_an_alltoallv_over_hosts_takes_the_slower_of_its_two_links(local, rng):
    clock = ManualClock()
    c = ModelledCommunicator(FourRanks(clock, 0.0), LINK, clock, local_link=local, local_ranks=2)
    assert c.name == "four over test between hosts of 2, " + local.name + " within"
    c.reset_bytes()
    x = rng.standard_normal((8, 5)).astype(np.float32)  # 20 bytes a row
    c.alltoallv(x, np.array([2, 3, 1, 2]))  # rank 0 of hosts {0, 1} and {2, 3}: every rank sends it 2 rows
    c.allreduce(x)
    c.reset_bytes()
    a2a, ring = c.timeline()[0].spans
    # between hosts: 2 peers, 1 + 2 rows out and 2 + 2 in; within: rank 1, 3 rows out and 2 in; the header crosses
    far, near = (2 + HEADER[0], 4 * 20 + HEADER[1]), (1, 3 * 20)
    assert (a2a.messages, a2a.nbytes) == (far[0] + near[0], far[1] + near[1])
    assert a2a.modelled_s == max(LINK.seconds(*far), local.seconds(*near))
    assert a2a.modelled_s == (local.seconds(*near) if local.name == "slow" else LINK.seconds(*far))
    # a ring crosses hosts: the link between them, as without hosts
    assert (ring.messages, ring.nbytes) == (6 + HEADER[0], 2 * 3 * 160 // 4 + HEADER[1])
    assert ring.modelled_s == LINK.seconds(ring.messages, ring.nbytes)
    assert c.step_summary()["link"] == f"test between hosts, {local.name} within"


def test_one_host_is_all_on_its_local_link_and_hosts_must_divide_the_ranks(rng):
    clock = ManualClock()
    local = Link("local", 2e-6, 1e10)
    c = ModelledCommunicator(FourRanks(clock, 0.0), LINK, clock, local_link=local, local_ranks=4)
    assert c.link is local and c.near is None and c.name == "four over local"
    solo = ModelledCommunicator(FourRanks(clock, 0.0), LINK, clock, local_link=local, local_ranks=1)
    assert solo.link is LINK and solo.near is None  # hosts of one rank: every peer is on another host
    for bad in (3, 0, None):
        with pytest.raises(ValueError, match=r"^ModelledCommunicator: local_ranks=.* a divisor of the 4 ranks$"):
            ModelledCommunicator(FourRanks(clock, 0.0), LINK, clock, local_link=local, local_ranks=bad)


def test_the_timeline_splits_a_step_into_compute_and_exposed_communication(rng):
    clock = ManualClock()
    c = ModelledCommunicator(FourRanks(clock, 0.0), LINK, clock)
    x = rng.standard_normal((100, 10)).astype(np.float32)
    c.allreduce(x)  # between steps: in no step
    for compute in (0.5, 1.5):
        c.reset_bytes()  # Cluster.begin_step
        clock.advance(compute / 2)
        c.allreduce(x)
        clock.advance(compute / 2)
        c.reset_bytes()  # Cluster.end_step
    steps = c.timeline()
    modelled = LINK.seconds(6 + 3, 2 * 3 * 4000 // 4 + HEADER[1])
    assert [len(s.spans) for s in steps] == [1, 1]
    for s, compute in zip(steps, (0.5, 1.5)):
        assert s.exposed_comm_s == s.comm_s == pytest.approx(modelled)  # nothing overlaps: all of it is exposed
        assert s.compute_s == pytest.approx(compute)
    summary = c.step_summary()
    assert summary.pop("exposed_by_tag_s") == pytest.approx({"allreduce": modelled})
    assert summary == pytest.approx({"link": "test", "steps": 2, "compute_s": 1.0, "comm_s": modelled,
                                     "exposed_comm_s": modelled, "modelled_s": modelled,
                                     "exposed_link_max_s": modelled, "exposed_link_min_s": modelled})
    assert c.timeline() == [] and c.step_summary()["steps"] == 0  # read once


def test_an_overlapped_collective_is_exposed_only_from_its_wait():
    # what a future asynchronous collective records: issued at 1, waited for from 3, done at 4
    spans = (Span("allreduce", "allreduce", 2, 100, 2.5, issued=1.0, waited=3.0, returned=2.0, done=4.0),
             Span("alltoallv", "a2a_fwd", 1, 50, 0.5, issued=3.5, waited=3.5, returned=3.6, done=4.5))
    step = Step(0.0, 6.0, spans)
    assert step.comm_s == 3.0 + 1.0
    assert step.exposed_comm_s == 1.5  # [3, 4] and [3.5, 4.5] overlap: waited for from 3 to 4.5
    assert step.compute_s == 4.5
    # at most: the link's time is each one's last stretch, [1.5, 4] of the first and [4, 4.5] of the second, so
    # from 3 all of the wait is the link's; at least: from each one's issue, [1, 3.5] and [3.5, 4], so [3, 4]
    assert step.exposed_link_max_s == pytest.approx(1.5) and step.exposed_link_min_s == pytest.approx(1.0)


def test_the_exposed_time_splits_by_tag_to_the_earliest_issued_collective_waited_for():
    # the loss's mean issued at 1, the first bucket at 2; the caller waits for the mean from 3 to 5 and for the
    # bucket from 5, which ends at 6; a key exchange issued at 0 is waited for from 0.5 to 1 and hidden after
    spans = (Span("alltoallv", "a2a_keys", 1, 8, 0.1, 0.0, 0.5, 1.0, 1.0),
             Span("allreduce", "loss", 1, 8, 0.1, 1.0, 3.0, 5.0, 5.0),
             Span("allreduce", "allreduce", 1, 8, 0.1, 2.0, 3.0, 4.0, 6.0),  # waited for with the mean: queued
             Span("alltoallv", "a2a_bwd", 1, 8, 0.1, 2.5, 7.0, 7.0, 7.0))  # done before its wait: hidden
    step = Step(0.0, 8.0, spans)
    # from 3 to 5 the bucket is waited for too, but the mean was issued first and ends first: the wait is its own
    assert step.exposed_by_tag_s == pytest.approx({"a2a_keys": 0.5, "loss": 2.0, "allreduce": 1.0})
    assert sum(step.exposed_by_tag_s.values()) == pytest.approx(step.exposed_comm_s)
    assert Step(5.5, 8.0, spans).exposed_by_tag_s == pytest.approx({"allreduce": 0.5})  # clipped to the step


def test_a_wait_for_a_late_rank_is_exposed_but_not_the_links():
    # issued at 0, waited for from 0.1; the link takes 0.2, but the last rank arrived and the result came at 1.0
    # its data moved once the last rank was there: the link is charged the last 0.2, the rest is the late rank
    late = Span("allreduce", "allreduce", 2, 100, 0.2, issued=0.0, waited=0.1, returned=1.0, done=1.0)
    # with no skew the link's 0.2 would have begun at the issue: [0.1, 0.2] of it waited for
    step = Step(0.0, 2.0, (late,))
    assert step.exposed_comm_s == pytest.approx(0.9)
    assert step.exposed_link_max_s == pytest.approx(0.2) and step.exposed_link_min_s == pytest.approx(0.1)
    # waited for in the last 0.1: all of it is the link's at most, and none of it at least (done by 0.2)
    short = Step(0.0, 2.0, (Span("allreduce", "allreduce", 2, 100, 0.2, issued=0.0, waited=0.9, returned=1.0,
                                 done=1.0),))
    assert short.exposed_comm_s == pytest.approx(0.1)
    assert short.exposed_link_max_s == pytest.approx(0.1) and short.exposed_link_min_s == 0
    hidden = Step(0.0, 2.0, (Span("allreduce", "allreduce", 2, 100, 0.2, issued=0.0, waited=1.5, returned=1.0,
                                  done=1.0),))  # waited for once done: nothing exposed
    assert hidden.exposed_comm_s == hidden.exposed_link_max_s == hidden.exposed_link_min_s == 0


def test_init_wraps_the_backend_in_the_link_it_is_given(monkeypatch, plain_process):
    c = comm.init("local", link="ib400")
    assert isinstance(c, ModelledCommunicator) and c.link is PRESETS["ib400"] and isinstance(c.clock, WallClock)
    assert c.name == "local over ib400"
    monkeypatch.setenv(comm.LINK_ENV, "1.5:25")
    assert comm.init().link == Link("1.5:25", 1.5e-6, 25e9)
    assert isinstance(comm.init(link="none"), LocalCommunicator)  # the argument wins over the environment
    alone = comm.init("local", link="ib100", local_link="nvlink4")  # one rank is one host, all on the local link
    assert alone.link is PRESETS["nvlink4"] and alone.near is None
    with pytest.raises(ValueError, match="^gpuemb.comm.init: a local link .nvlink4. without a link between hosts"):
        comm.init("local", link="none", local_link="nvlink4")


def test_a_train_record_holds_the_steps_times_over_a_modelled_link(tmp_path):
    from gpuemb.train.config import TrainConfig
    from gpuemb.train.run import train

    metrics = tmp_path / "metrics.jsonl"
    c = ModelledCommunicator(LocalCommunicator(), PRESETS["ib100"])
    train(TrainConfig.from_dict({"model_args": {"top": [16], "bottom": [8]}, "embedding_dim": 4, "batch_size": 64,
                                 "eval_rows": 200, "progress": False, "steps": 4, "log_every": 2, "seed": 1,
                                 "metrics_out": str(metrics)}), comm=c)
    records = [r for r in map(json.loads, metrics.read_text().splitlines()) if r["kind"] == "train"]
    assert [r["link"]["steps"] for r in records] == [2, 2]
    for r in records:
        link = r["link"]
        assert link["link"] == "ib100" and link["modelled_s"] == 0  # one rank: nothing on the link
        assert link["exposed_comm_s"] == link["comm_s"] and link["compute_s"] > 0
