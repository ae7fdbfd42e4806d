"""Time per phase of the training steps (``--phase-times``): where a step's time goes, by the phases that already
split its launch counts (``gpuemb.autograd.launches.PHASES``: lookup, interaction, mlp_forward, the backwards,
embedding_backward with the rows' update, communication, dense_optimizer...).

A step run under ``PhaseTimer.step()`` listens to the phase marks of its own thread: at each change of phase it
takes a time mark (``backend.time_mark``: the wall clock on the CPU, an event on the device's stream), and
``per_step()`` turns the marks into seconds, once per train record, so a GPU waits for its events once a record
and never within a step. A phase's time is exclusive: the MLPs' time is not also the interaction's that runs them.
What the step runs outside every mark is ``other``; the phases add up to the step's own time, from its first line
to its last. A prefetch on the pipeline's worker thread is not the step's and is not timed.

Without ``--phase-times`` the trainer holds ``NO_TIMER``, whose ``step()`` does nothing: no listener is set, so a
step pays nothing but one test per change of phase (``launches.listen``).
"""
import contextlib
import threading
from collections import defaultdict

from gpuemb.autograd import backend, launches


class PhaseTimer:
    """Marks of the phases of the steps since the last ``per_step()``; see the module docstring."""

    def __init__(self):
        self.marks, self.names = [], []  # a time mark, then the phase from it on (None: between steps)
        self.steps, self._thread = 0, None

    @contextlib.contextmanager
    def step(self):
        """Time the phases of the step run in the block (on this thread)."""
        self._thread = threading.get_ident()
        self._switch(launches.current_phase())
        replaced = launches.listen(self._heard)
        try:
            yield
        finally:
            launches.listen(replaced)
            self._switch(None)
            self.steps += 1

    def _heard(self, name):
        if threading.get_ident() == self._thread and name != self.names[-1]:
            self._switch(name)

    def _switch(self, name):
        self.marks.append(backend.time_mark())
        self.names.append(name)

    def per_step(self):
        """``{phase: seconds per step}`` over the steps since the last call (then forgotten), in the order of
        ``launches.PHASES``; {} when no step ran."""
        spans = backend.seconds_between(self.marks)
        total = defaultdict(float)
        for name, seconds in zip(self.names, spans):
            if name is not None:
                total[name] += seconds
        steps = max(self.steps, 1)
        self.marks, self.names, self.steps = [], [], 0
        return {p: total[p] / steps for p in launches.PHASES if p in total}


class NoTimer:
    """The timer of a run without ``--phase-times``: nothing timed, nothing recorded."""

    def step(self):
        return contextlib.nullcontext()

    def per_step(self):
        return None


NO_TIMER = NoTimer()
