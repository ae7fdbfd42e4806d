"""The timeline of a modelled link: each collective's times, grouped by training step, and what a step spent on
compute, on communication, and on communication it waited for (exposed).

A collective is a :class:`Span` of four times on the communicator's clock: ``issued`` (called), ``waited`` (the
caller began to wait for its result), ``returned`` (the wrapped backend gave its result) and ``done`` (the link
would have delivered it too). A blocking collective is waited for as it is issued, so all of it is exposed; an
overlapped one (``overlap.py``) is waited for later, and the time from ``issued`` to ``waited`` is compute that
hid it. Per step:

- ``comm_s``: the collectives' times, ``done - issued``, added;
- ``exposed_comm_s``: the time the step spent waiting, the union of the spans' ``[waited, done]``;
- ``compute_s``: the rest of the step, its length less ``exposed_comm_s``;
- ``modelled_s``: what the link model alone says the collectives take, added;
- ``exposed_link_max_s`` and ``exposed_link_min_s``: the part of ``exposed_comm_s`` that the link's own time
  explains, at most and at least (below);
- ``exposed_by_tag_s``: ``exposed_comm_s`` split by the collectives' tags (``a2a_fwd``, ``allreduce``, ``loss``...),
  which add up to it. Where the caller waits while several are unfinished, the wait is the earliest issued one's:
  a communicator's collectives complete in the order they were issued (one thread runs them, ``overlap.py``), so
  the later ones cannot end before it, and waiting on them is waiting on it.

What is exposed beyond the link's time is a wait for the other ranks (the slowest one arrives late) or for a real
transport slower than the link, neither of which hiding the link's time can remove. Where within a collective the
link's ``modelled_s`` falls depends on when the last rank arrived, which a rank cannot see without a clock shared
with the others. So the split is a bracket, each the union over the spans of ``[waited, done]`` with a window:
- at most, the window ``[done - modelled_s, done]``: the data moved once the last rank was there, at the end, so
  the link is charged first for any wait;
- at least, ``[issued, issued + modelled_s]``: every rank was there when this one issued it (no skew).
Each divided by ``modelled_s`` brackets the share of the link's time that the step did not hide.
"""
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """One collective: ``op`` under ``tag``, ``messages`` and ``nbytes`` on the link, its times (module docstring)."""

    op: str
    tag: str
    messages: int
    nbytes: int
    modelled_s: float
    issued: float
    waited: float
    returned: float
    done: float

    @property
    def comm_s(self):
        return self.done - self.issued

    @property
    def exposed_s(self):
        return self.done - self.waited

    @property
    def link_last(self):
        """Within ``[waited, done]``, the link's time put last: ``[done - modelled_s, done]``."""
        return max(self.waited, self.done - self.modelled_s), self.done

    @property
    def link_first(self):
        """Within ``[waited, done]``, the link's time from the issue: ``[issued, issued + modelled_s]``."""
        return max(self.waited, self.issued), min(self.done, self.issued + self.modelled_s)


@dataclass(frozen=True)
class Step:
    """A training step from ``begin`` to ``end``, with the collectives issued in it."""

    begin: float
    end: float
    spans: tuple

    @property
    def comm_s(self):
        return sum(s.comm_s for s in self.spans)

    @property
    def exposed_comm_s(self):
        return self._covered([(s.waited, s.done) for s in self.spans])

    @property
    def exposed_link_max_s(self):
        return self._covered([s.link_last for s in self.spans])

    @property
    def exposed_link_min_s(self):
        return self._covered([s.link_first for s in self.spans])

    @property
    def exposed_by_tag_s(self):
        """``{tag: seconds}``: ``exposed_comm_s`` credited, each instant of it, to the earliest issued collective
        waited for then (module docstring)."""
        spans = [s for s in self.spans if min(s.done, self.end) > max(s.waited, self.begin)]
        cuts = sorted({self.begin, self.end} | {min(max(t, self.begin), self.end)
                                               for s in spans for t in (s.waited, s.done)})
        out = {}
        for a, b in zip(cuts, cuts[1:]):
            waiting = [s for s in spans if s.waited <= a and s.done >= b]
            if waiting and b > a:
                tag = min(waiting, key=lambda s: s.issued).tag
                out[tag] = out.get(tag, 0.0) + b - a
        return out

    def _covered(self, windows):
        """The length of the union of ``windows`` (``(start, stop)`` pairs), clipped to the step."""
        covered, reach = 0.0, self.begin
        for start, stop in sorted(windows):
            start, stop = max(start, reach), min(stop, self.end)
            if stop > start:
                covered, reach = covered + stop - start, stop
        return covered

    @property
    def compute_s(self):
        return self.end - self.begin - self.exposed_comm_s

    @property
    def modelled_s(self):
        return sum(s.modelled_s for s in self.spans)


FIELDS = ("compute_s", "comm_s", "exposed_comm_s", "modelled_s", "exposed_link_max_s", "exposed_link_min_s")


class Timeline:
    """The steps and collectives recorded since the last ``summary()``; safe to record from several threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._steps, self._open, self._spans = [], None, []  # finished steps; the open step's begin and spans

    def record(self, span):
        with self._lock:
            self._spans.append(span)

    def begin_step(self, now):
        with self._lock:
            self._open, self._spans = now, []  # what came between steps (an evaluation's) is not a step's

    def end_step(self, now):
        with self._lock:
            if self._open is not None:
                self._steps.append(Step(self._open, now, tuple(self._spans)))
            self._open, self._spans = None, []

    @property
    def in_step(self):
        return self._open is not None

    def steps(self):
        """The finished steps since the last ``summary()``."""
        with self._lock:
            return list(self._steps)

    def summary(self):
        """``{"steps": n, field: seconds per step, "exposed_by_tag_s": {tag: seconds per step}}`` of the finished
        steps since the last call, which are then forgotten; the fields are ``FIELDS`` (module docstring), 0.0 when
        no step finished."""
        with self._lock:
            steps, self._steps = self._steps, []
        n = max(len(steps), 1)
        by_tag = {}
        for step in steps:
            for tag, seconds in step.exposed_by_tag_s.items():
                by_tag[tag] = by_tag.get(tag, 0.0) + seconds / n
        return {"steps": len(steps), **{f: sum(getattr(s, f) for s in steps) / n for f in FIELDS},
                "exposed_by_tag_s": dict(sorted(by_tag.items()))}
