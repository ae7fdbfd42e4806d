"""The run's schedule (schedule.py): what comes after each step, and where the step before may look ahead."""
from gpuemb.train.schedule import Schedule


class Every:
    def __init__(self, n):
        self.n = n

    def due(self, step):
        return step % self.n == 0


def test_what_follows_each_step_and_where_the_step_before_may_look_ahead():
    s = Schedule(total_steps=12, log_every=2, eval_every=4, checkpointing=True, checkpoint_every=6, deltas=Every(5))
    assert [t for t in range(1, 13) if s.logs(t)] == [2, 4, 6, 8, 10, 12]
    assert [t for t in range(1, 13) if s.evaluates(t)] == [4, 8, 12]
    assert [t for t in range(1, 13) if s.checkpoints(t)] == [6, 12]  # every 6, and after the last
    assert [t for t in range(1, 13) if s.writes_delta(t)] == [5, 6, 10, 12]  # due, at checkpoints, the last
    # step t + 1 may prepare t + 2's batch unless an evaluation, a delta or a checkpoint follows t + 1, or t + 1 is
    # the last step
    assert [t for t in range(0, 12) if s.may_prepare_after(t)] == [0, 1, 2, 6, 8, 10]


def test_without_checkpoints_or_deltas_only_evaluations_and_the_end_stop_the_look_ahead():
    s = Schedule(total_steps=6, log_every=1, eval_every=3)
    assert not any(s.checkpoints(t) or s.writes_delta(t) for t in range(1, 7))
    assert [t for t in range(0, 6) if s.may_prepare_after(t)] == [0, 1, 3, 4]
