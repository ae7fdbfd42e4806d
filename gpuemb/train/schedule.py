"""When a run does what: the one set of rules that the training loop (``training_loop.Loop``) follows both for what
comes after a step and for the pipeline's look-ahead (``Loop.may_prepare_after``), so they cannot disagree.

After step ``s`` (counted from 1) the loop writes a train record (every ``log_every`` steps, and after the last),
evaluates (every ``eval_every``), writes a delta (when it is due, at a checkpoint and after the last step) and
then a checkpoint (every ``checkpoint_every`` and after the last, where there is a checkpoint folder). The step
before may prepare step ``s``'s batch ahead (the prefetch, the key exchange) only where none of the evaluation,
the delta or the checkpoint comes after ``s - 1``: they must see the tables as step ``s - 1`` left them.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """``total_steps`` steps; ``checkpoint_every`` 0 and ``checkpointing`` False where there are none;
    ``deltas`` a ``deltas.DeltaWriter`` (its ``due(step)``) or None."""

    total_steps: int
    log_every: int
    eval_every: int
    checkpointing: bool = False
    checkpoint_every: int = 0
    deltas: object = None

    def last(self, step):
        return step == self.total_steps

    def logs(self, step):
        return step % self.log_every == 0

    def evaluates(self, step):
        return step % self.eval_every == 0

    def checkpoints(self, step):
        return self.checkpointing and (self.last(step) or bool(self.checkpoint_every)
                                       and step % self.checkpoint_every == 0)

    def writes_delta(self, step):
        return self.deltas is not None and (self.checkpoints(step) or self.last(step) or self.deltas.due(step))

    def may_prepare_after(self, step):
        """Whether step ``step + 1`` may prepare the batch of the step after it."""
        after = step + 1
        return after < self.total_steps and not (self.evaluates(after) or self.checkpoints(after)
                                                 or self.writes_delta(after))
